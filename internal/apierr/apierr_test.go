package apierr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agentenv/agentenv"
)

func TestKindMapsStatuses(t *testing.T) {
	for _, tt := range []struct {
		status int
		want   error
	}{
		{401, agentenv.ErrUnavailable}, {403, agentenv.ErrUnavailable}, {429, agentenv.ErrUnavailable},
		{502, agentenv.ErrUnavailable}, {504, agentenv.ErrUnavailable},
		{404, agentenv.ErrNotFound}, {409, agentenv.ErrConflict}, {400, agentenv.ErrInvalid}, {422, agentenv.ErrInvalid},
	} {
		err := Kind(fmt.Errorf("create: %w", &Error{Status: tt.status, Message: "no"}))
		var ae *Error
		if !errors.Is(err, tt.want) || !errors.As(err, &ae) || ae.Status != tt.status {
			t.Errorf("Kind(%d) = %v, want %v keeping the answer", tt.status, err, tt.want)
		}
	}
	for _, err := range []error{&Error{Status: 500}, context.Canceled} {
		if got := Kind(err); got != err {
			t.Errorf("Kind(%v) = %v, want it unchanged", err, got)
		}
	}
	if got := (&Error{Status: 503}).Error(); got != "503: Service Unavailable" {
		t.Errorf("Error() = %q", got)
	}
}
