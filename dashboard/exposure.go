package dashboard

import (
	"context"
	"errors"
	"net/http"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/history"
)

// exposureSource is what the exposure search page needs of the View
// (*fleetview.View implements it).
type exposureSource interface {
	Exposure(ctx context.Context, q history.ExposureQuery) (*history.Exposure, error)
}

// exposureData is the exposure search page: the query, and the answer once
// one was asked.
type exposureData struct {
	Query  history.ExposureQuery
	Asked  bool
	Answer *history.Exposure
	// NoMatch is set when no recorded revision matches the query.
	NoMatch bool
}

// handleExposure is `fleet history exposure` as a search: ?image=,
// &score-digest=, &deployment= (ADR 0021). Without a query it shows the
// form; a query no revision matches says so on the page.
func (s *Server) handleExposure(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := exposureData{Query: history.ExposureQuery{Image: q.Get("image"), ScoreDigest: q.Get("score-digest"), Deployment: q.Get("deployment")}}
	d.Asked = d.Query.Image != "" || d.Query.ScoreDigest != "" || d.Query.Deployment != ""
	src, ok := s.o.View.(exposureSource)
	if d.Asked && !ok {
		s.errorPage(w, r, http.StatusNotFound, "Exposure not available", "This dashboard's view cannot answer exposure questions.")
		return
	}
	if d.Asked {
		e, err := src.Exposure(r.Context(), d.Query)
		switch {
		case errors.Is(err, fleetview.ErrNotFound):
			d.NoMatch = true
		case err != nil:
			s.viewError(w, r, "exposure", err)
			return
		default:
			d.Answer = e
		}
	}
	p := s.base(r, "Exposure: who ran an image", "exposure")
	p.Data = d
	s.render(w, r, http.StatusOK, "exposure", p)
}
