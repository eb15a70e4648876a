package devop

import (
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/zitadel/oidc/v3/pkg/op"
)

// loginPath is where the provider's login page is served. The
// authorization endpoint redirects there with ?authRequestID=.
const loginPath = "/login"

// loggedOutPath is where end_session redirects without a registered
// post_logout_redirect_uri.
const loggedOutPath = "/logged-out"

// wrongCredentials is the one message for an unknown name and a wrong
// password alike: the page never tells which user names exist.
const wrongCredentials = "Wrong user name or password."

const expiredRequest = "This sign-in request is unknown, finished or expired. Go back to the application and sign in again."

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} – Harmony Fleet development sign-in</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 24rem; margin: 3rem auto; padding: 0 1rem; line-height: 1.5; }
label { display: block; margin-top: 1rem; font-weight: 600; }
input { font: inherit; width: 100%; box-sizing: border-box; padding: .5rem; }
button { font: inherit; margin-top: 1.5rem; padding: .5rem 1.5rem; }
.error { color: #a00000; border: 2px solid #a00000; padding: .5rem; }
.note { color: #444; font-size: .9rem; }
</style>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
{{if .Error}}<p class="error" role="alert" id="login-error">{{.Error}}</p>{{end}}
{{if .AuthRequestID}}<form method="post" action="{{.Action}}">
<input type="hidden" name="authRequestID" value="{{.AuthRequestID}}">
<label for="username">User name</label>
<input id="username" name="username" type="text" autocomplete="username" required autofocus value="{{.Username}}"{{if .Error}} aria-describedby="login-error"{{end}}>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required{{if .Error}} aria-describedby="login-error"{{end}}>
<button type="submit">Sign in</button>
</form>{{end}}
<p class="note">Development identity provider of <code>fleet dev</code>. Never used in production.</p>
</main>
</body>
</html>
`))

type page struct {
	Title         string
	Error         string
	Action        string
	AuthRequestID string
	Username      string
	// formTarget is the origin of the sign-in request's registered
	// redirect URI: browsers apply form-action to the redirects that
	// follow a submitted form, and a successful sign-in ends in one to the
	// client. "": the page has no form.
	formTarget string
}

// origin is the scheme://host[:port] of a registered redirect URI, or ""
// when it is not an absolute http(s) URL (RegisterWebClient refuses
// those, so "" only keeps a malformed value out of the header).
func origin(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(u.Host, " ;,'\"") {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

func writePage(w http.ResponseWriter, status int, pg page) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	formAction := "'self'"
	if pg.formTarget != "" {
		formAction += " " + pg.formTarget
	}
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action "+formAction+"; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_ = pageTemplate.Execute(w, pg)
}

// loginHandler serves the sign-in form for an authorization request (GET)
// and checks the user name and password (POST). On success the request is
// completed and the browser goes on to op's authorization callback, which
// redirects to the client with the code. The password is never logged.
func (p *Provider) loginHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+loginPath, func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("authRequestID")
		ar, err := p.authRequestByID(id)
		if err != nil {
			writePage(w, http.StatusBadRequest, page{Title: "Sign in", Error: expiredRequest})
			return
		}
		writePage(w, http.StatusOK, page{Title: "Sign in", Action: loginPath, AuthRequestID: id, formTarget: origin(ar.redirectURI)})
	})
	mux.HandleFunc("POST "+loginPath, func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<14)
		if err := r.ParseForm(); err != nil {
			writePage(w, http.StatusBadRequest, page{Title: "Sign in", Error: "The form could not be read."})
			return
		}
		id, name, password := r.PostForm.Get("authRequestID"), r.PostForm.Get("username"), r.PostForm.Get("password")
		ar, err := p.authRequestByID(id)
		if err != nil {
			writePage(w, http.StatusBadRequest, page{Title: "Sign in", Error: expiredRequest})
			return
		}
		userID, ok := p.checkPassword(name, password)
		if !ok {
			p.log.Info("sign-in refused: wrong user name or password", "client", ar.clientID)
			writePage(w, http.StatusUnauthorized, page{Title: "Sign in", Error: wrongCredentials, Action: loginPath, AuthRequestID: id, Username: name,
				formTarget: origin(ar.redirectURI)})
			return
		}
		if err := p.completeAuthRequest(id, userID); err != nil {
			writePage(w, http.StatusBadRequest, page{Title: "Sign in", Error: expiredRequest})
			return
		}
		p.log.Info("signed in", "user", userID, "client", ar.clientID)
		// Relative, so it works whatever host name the browser uses.
		http.Redirect(w, r, op.DefaultEndpoints.Authorization.Relative()+"/callback?id="+url.QueryEscape(id), http.StatusFound)
	})
	mux.HandleFunc("GET "+loggedOutPath, func(w http.ResponseWriter, _ *http.Request) {
		writePage(w, http.StatusOK, page{Title: "Signed out"})
	})
	return mux
}
