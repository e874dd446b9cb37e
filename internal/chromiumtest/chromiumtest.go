// Package chromiumtest starts Debian's Chromium, headless, for the tests that look at a page
// as a person's browser does (the explorer, the shop through the gateway).
package chromiumtest

import (
	"context"
	"os"
	"testing"

	"github.com/chromedp/chromedp"
)

// Path is Debian's Chromium (apt-get install chromium), which .ci/run installs.
const Path = "/usr/bin/chromium"

// Tab starts a headless Chromium for the test, with opts added to chromedp's defaults, and
// returns its tab; both end with the test. A missing Chromium fails the test.
func Tab(t *testing.T, opts ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	if _, err := os.Stat(Path); err != nil {
		t.Fatalf("browser tests need Debian's Chromium at %s (apt-get install chromium): %v", Path, err)
	}
	all := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(Path), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), append(all, opts...)...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}
