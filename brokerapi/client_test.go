package brokerapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
)

// TestClientNamesPrincipal checks that the internal client names the
// principal of its context, and only where there is one.
func TestClientNamesPrincipal(t *testing.T) {
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get(brokerapi.HeaderPrincipal)
		_, _ = io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	c := brokerapi.NewClient()
	defer c.Close()
	addr := srv.Listener.Addr().String()
	if _, err := c.TopicStatus(auth.WithPrincipal(context.Background(), "User:alice"), addr, "t"); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != "User:alice" {
		t.Fatalf("header %q with User:alice in the context", p)
	}
	if _, err := c.TopicStatus(context.Background(), addr, "t"); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != "" {
		t.Fatalf("header %q with no principal in the context", p)
	}
}
