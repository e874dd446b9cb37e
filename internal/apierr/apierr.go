// Package apierr is the error a cloud sandbox API reached over HTTP (E2B, Tensorlake) answers,
// and its mapping to agentenv's error kinds, shared by the providers that call such APIs
// (package cloudapi makes the requests and decodes error answers into an Error).
package apierr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/agentenv/agentenv"
)

// Error is a non-2xx answer: its HTTP status and the message the API gave.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%d: %s", e.Status, msg)
}

// Kind maps an HTTP outcome to an agentenv error kind, keeping the original. 401, 403, 429 and
// 502-504 (auth, rate, capacity, the cloud down) are ErrUnavailable, so a chain moves on, as are
// a refused dial and a network timeout; 404 is ErrNotFound; 409 ErrConflict; other 4xx
// ErrInvalid. A cancelled or expired context, and anything else, is returned as it is.
func Kind(err error) error {
	var ae *Error
	var ne net.Error
	var oe *net.OpError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &ae):
		switch {
		case ae.Status == http.StatusUnauthorized, ae.Status == http.StatusForbidden,
			ae.Status == http.StatusTooManyRequests, ae.Status >= 502 && ae.Status <= 504:
			return fmt.Errorf("%w: %w", agentenv.ErrUnavailable, err)
		case ae.Status == http.StatusNotFound:
			return fmt.Errorf("%w: %w", agentenv.ErrNotFound, err)
		case ae.Status == http.StatusConflict:
			return fmt.Errorf("%w: %w", agentenv.ErrConflict, err)
		case ae.Status >= 400 && ae.Status < 500:
			return fmt.Errorf("%w: %w", agentenv.ErrInvalid, err)
		}
	case errors.As(err, &oe) && oe.Op == "dial", errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w: %w", agentenv.ErrUnavailable, err)
	}
	return err
}

// Status is the HTTP status of the *Error err wraps, or 0 when it wraps none (a transport
// error, a cancelled context).
func Status(err error) int {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}
