#!/bin/sh
# EXAMPLE_ROLE=migrate runs the data migration and exits (the init
# container); anything else serves the API.
if [ "$EXAMPLE_ROLE" = migrate ]; then
	exec sh /app/migrate.sh
fi
trap 'exit 0' TERM
httpd -f -p 9090 -h /app/www &
wait
