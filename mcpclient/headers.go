package mcpclient

import "net/http"

// Headers returns an http.RoundTripper that sends each request through next
// (http.DefaultTransport if nil) with every header of h set, for callers handed a gateway's
// headers (an agent's Authorization with its role token) rather than a bare token.
func Headers(h map[string]string, next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return headers{h: h, next: next}
}

type headers struct {
	h    map[string]string
	next http.RoundTripper
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.h) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.h {
			r.Header.Set(k, v)
		}
	}
	return t.next.RoundTrip(r)
}
