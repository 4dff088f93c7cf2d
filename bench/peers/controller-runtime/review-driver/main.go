// Command review-driver posts one ConversionReview over and over to a webhook, the way
// kube-apiserver calls a webhook: a Go HTTP/1.1 client over TLS, one keep-alive
// connection, one request after another. It is the driver of the direct reviews of the
// conversion benchmark (bench/conversion/run.py), used for both webhooks, so that the
// client's own pauses (a Python client's garbage collector and event loop) do not land in
// the webhooks' latency.
//
// It prints one line: a JSON array of the latencies in nanoseconds of the timed requests
// (the warm-up requests before them are not timed). It exits non-zero if any answer is
// not a 200 holding "Success".
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	url := flag.String("url", "", "the webhook's /convert URL")
	caFile := flag.String("ca", "", "PEM file of the CA that signed the webhook's certificate")
	bodyFile := flag.String("body", "", "file holding the ConversionReview to post")
	count := flag.Int("n", 1000, "timed requests")
	warmup := flag.Int("warmup", 50, "requests before the timed ones")
	flag.Parse()

	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		fail(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		fail(fmt.Errorf("no certificate in %s", *caFile))
	}
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		fail(err)
	}
	client := &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
			ForceAttemptHTTP2:   false,
		},
	}
	latencies := make([]int64, 0, *count)
	for i := 0; i < *warmup+*count; i++ {
		started := time.Now()
		resp, err := client.Post(*url, "application/json", bytes.NewReader(body))
		if err != nil {
			fail(err)
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		elapsed := time.Since(started)
		if err != nil {
			fail(err)
		}
		if resp.StatusCode != http.StatusOK || !bytes.Contains(answer, []byte(`"Success"`)) {
			fail(fmt.Errorf("%s answered %d: %.300s", *url, resp.StatusCode, answer))
		}
		if i >= *warmup {
			latencies = append(latencies, elapsed.Nanoseconds())
		}
	}
	out, _ := json.Marshal(latencies)
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "review-driver:", err)
	os.Exit(1)
}
