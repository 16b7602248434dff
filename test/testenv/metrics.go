package testenv

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"time"
)

// metricsClient trusts any certificate: the provider's metrics endpoint serves a
// self-signed one unless told otherwise, and the tests check who may read, not the TLS.
var metricsClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the provider's self-signed certificate
}}

// GetMetrics GETs url (the provider's /metrics over HTTPS) as Prometheus would, with the
// bearer token when it is not empty, and returns the status code and the body.
func GetMetrics(ctx context.Context, url, bearer string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
