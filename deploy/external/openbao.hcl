# OpenBao for Fleet: devices read pull credentials and application secrets
# at secret/data/fleet/<namespace>/... with their id_token (JWT auth); the
# operator, with the optional administrator token, keeps the
# fleet-deploy.* policies (docs/operator.md, "OpenBao pull-secret policies").
ui = false
disable_mlock = true

listener "tcp" {
  address = "0.0.0.0:8200"
  # TLS ends at the Ingress of the production overlay; inside the cluster
  # the NetworkPolicy of your installation limits who reaches this port.
  tls_disable = true
}

storage "raft" {
  path = "/openbao/data"
}

api_addr     = "http://openbao:8200"
cluster_addr = "http://openbao-0.openbao:8201"
