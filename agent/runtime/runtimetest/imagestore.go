package runtimetest

import (
	"errors"
	"strings"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// store is the case's runtime as a runtime.ImageStore; the case fails
// when it is not one (every runtime of the module is).
func (s *suite) store() runtime.ImageStore {
	s.t.Helper()
	st, ok := s.rt.rt.(runtime.ImageStore)
	if !ok {
		s.t.Fatalf("%T is not a runtime.ImageStore", s.rt.rt)
	}
	return st
}

func testImageStoreSpace(s *suite) {
	space, err := s.store().ImageStoreSpace(s.ctx())
	if err != nil {
		s.t.Fatalf("ImageStoreSpace: %v", err)
	}
	if space.Path == "" || space.Free <= 0 || space.Size < space.Free {
		s.t.Errorf("ImageStoreSpace = %+v: want a path, free bytes and a size at least as large", space)
	}
}

func testMissingLayers(s *suite) {
	st := s.store()
	reg := s.registry()
	auth := reg.Auth
	record := func(method string, err error) error { return s.rt.record(method, err) }

	missing, err := st.MissingLayers(s.ctx(), reg.Private, &auth)
	if err = record("MissingLayers", err); err != nil {
		s.t.Fatalf("MissingLayers of %s before its pull: %v", reg.Private, err)
	}
	// The engine may hold some or all of its layers already (Podman
	// shares them with local images built from the same base): only
	// their form is checked.
	for _, l := range missing {
		if !strings.HasPrefix(l.Digest, "sha256:") || l.Size <= 0 {
			s.t.Errorf("MissingLayers of %s: layer %+v, want a sha256 digest and a size", reg.Private, l)
		}
	}
	_, err = st.MissingLayers(s.ctx(), reg.Private, nil)
	var pe *runtime.PullError
	if err = record("MissingLayers", err); !errors.Is(err, runtime.ErrAuth) || !errors.As(err, &pe) {
		s.t.Errorf("MissingLayers of %s without credentials: %v, want a *PullError with ErrAuth", reg.Private, err)
	}
	_, err = st.MissingLayers(s.ctx(), reg.Missing, &auth)
	if err = record("MissingLayers", err); !errors.Is(err, runtime.ErrImageNotFound) {
		s.t.Errorf("MissingLayers of %s: %v, want ErrImageNotFound", reg.Missing, err)
	}
	if err := s.rt.Pull(s.ctx(), reg.Private, &auth); err != nil {
		s.t.Fatalf("Pull: %v", err)
	}
	for _, ref := range []string{reg.Private, s.fx.Running} {
		if got, err := st.MissingLayers(s.ctx(), ref, &auth); err != nil || len(got) != 0 {
			s.t.Errorf("MissingLayers of the local %s = %v, %v; want none", ref, got, err)
		}
	}
}

func testDeleteImage(s *suite) {
	pr, ok := s.rt.rt.(runtime.ImagePruner)
	if !ok {
		s.t.Fatalf("%T is not a runtime.ImagePruner", s.rt.rt)
	}
	reg := s.registry()
	auth := reg.Auth
	if err := s.rt.Pull(s.ctx(), reg.Private, &auth); err != nil {
		s.t.Fatalf("Pull: %v", err)
	}
	id := s.create(s.spec("uses", reg.Private))
	if err := s.rt.record("DeleteImage", pr.DeleteImage(s.ctx(), reg.Private)); !errors.Is(err, runtime.ErrImageInUse) {
		s.t.Errorf("DeleteImage of an image a created container uses: %v, want ErrImageInUse", err)
	}
	if ok, err := s.rt.ImageExists(s.ctx(), reg.Private); err != nil || !ok {
		s.t.Fatalf("after a refused DeleteImage ImageExists = %v, %v; want true", ok, err)
	}
	if err := s.rt.Remove(s.ctx(), id, true); err != nil {
		s.t.Fatalf("Remove: %v", err)
	}
	if err := pr.DeleteImage(s.ctx(), reg.Private); err != nil {
		s.t.Fatalf("DeleteImage of an image no container uses: %v", err)
	}
	if ok, err := s.rt.ImageExists(s.ctx(), reg.Private); err != nil || ok {
		s.t.Errorf("after DeleteImage ImageExists = %v, %v; want false", ok, err)
	}
	if err := s.rt.record("DeleteImage", pr.DeleteImage(s.ctx(), reg.Private)); !errors.Is(err, runtime.ErrImageNotFound) {
		s.t.Errorf("DeleteImage of an absent image: %v, want ErrImageNotFound", err)
	}
}
