// Package ctxerr says why a call cut short by its context failed: the context's own error reads
// more clearly than what the transport made of it ("use of closed network connection", a
// truncated stream, a gRPC status).
package ctxerr

import "context"

// Prefer returns ctx's error once ctx has ended, else err.
func Prefer(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}
