package bundle

import "time"

func timeZero() time.Time { return time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC) }
