package emufault

import "testing"

func TestCreateFaultIsUsedUpAfterTimes(t *testing.T) {
	var f Faults
	f.SetCreate(&Create{Status: 503, Times: 2})
	for i := range 2 {
		if c := f.TakeCreate(); c == nil || c.Status != 503 {
			t.Fatalf("create %d played %+v, want the 503", i, c)
		}
	}
	if c := f.TakeCreate(); c != nil {
		t.Errorf("third create played %+v, want none", c)
	}
	f.SetCreate(&Create{Status: 429})
	for i := range 3 {
		if c := f.TakeCreate(); c == nil {
			t.Fatalf("create %d played none, want the 429 every time", i)
		}
	}
}

func TestKillFaultIsUsedUpAfterTimes(t *testing.T) {
	var f Faults
	if code := f.TakeKill(); code != 0 {
		t.Fatalf("unarmed kill fails with %d", code)
	}
	f.SetKill(500, 1)
	if a, b := f.TakeKill(), f.TakeKill(); a != 500 || b != 0 {
		t.Errorf("kills fail with %d, %d; want 500 then 0", a, b)
	}
	f.SetKill(500, 0)
	if a, b := f.TakeKill(), f.TakeKill(); a != 500 || b != 500 {
		t.Errorf("kills fail with %d, %d; want 500 every time", a, b)
	}
}

func TestHoldAndLingerOnNil(t *testing.T) {
	var c *Create
	if !c.Hold(nil) {
		t.Error("Hold without a fault says stop")
	}
	c.Linger(nil)
	closed := make(chan struct{})
	close(closed)
	if (&Create{Hang: make(chan struct{})}).Hold(closed) {
		t.Error("Hold on a closed server says go on")
	}
}
