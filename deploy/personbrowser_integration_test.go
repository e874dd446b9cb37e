//go:build integration

package deploy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/gateway"
	"github.com/agentenv/agentenv/internal/chromiumtest"
)

// openShopInChromium is a person opening the deployed shop through the gateway in a real
// browser: the admin token once in the URL, then the page, an order placed with its form (a
// POST that carries the gateway's cookie from the gateway's own origin), and its confirmation.
func openShopInChromium(t *testing.T, res *deploy.Result) {
	t.Helper()
	tab := chromiumtest.Tab(t)
	ctx, cancelWait := context.WithTimeout(tab, 90*time.Second)
	defer cancelWait()
	base := strings.TrimSuffix(res.GatewayURL, "/mcp") + "/website/shop/"
	button := chromedp.Search(`//button[normalize-space()="Order Blue mug"]`)
	fail := func(what string, err error) {
		t.Helper()
		at, _ := chromedp.Run(ctx, chromedp.Location())
		t.Fatalf("Chromium on %s: %s: %v (at %s)", base, what, err, at)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"?"+gateway.SvcTokenParam+"="+res.Token), chromedp.WaitVisible(button)); err != nil {
		fail("open with the token", err)
	}
	location, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		fail("location", err)
	}
	catalogue, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		fail("catalogue", err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(button), chromedp.WaitVisible(chromedp.CSS("#receipt"))); err != nil {
		fail("order with the form", err)
	}
	receipt, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#receipt")))
	if err != nil {
		fail("receipt", err)
	}
	if location != base || strings.Contains(location, res.Token) {
		t.Errorf("the page is at %q, want %q without the token", location, base)
	}
	if !strings.Contains(catalogue, "Notebook") {
		t.Errorf("the catalogue in Chromium lacks the Notebook:\n%s", catalogue)
	}
	if !strings.Contains(receipt, "placed") || !strings.Contains(receipt, "Blue mug") {
		t.Errorf("the confirmation in Chromium: %q", receipt)
	}
}
