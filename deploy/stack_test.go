package deploy

import "testing"

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:49153":           "http://127.0.0.1:49153",
		"https://8080-sb1.e2b.app":  "https://8080-sb1.e2b.app",
		"https://8080-sb1.e2b.app/": "https://8080-sb1.e2b.app",
		"http://[::1]:8080":         "http://[::1]:8080",
	} {
		if got := baseURL(in); got != want {
			t.Errorf("baseURL(%q) = %q, want %q", in, got, want)
		}
	}
}
