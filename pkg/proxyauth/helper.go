package proxyauth

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// maxLine bounds what the helper keeps of one line from Squid: a channel ID,
// a username and a password, URL-escaped; a lease's are under 200 bytes.
// Squid passes on what a client sent, so a longer line is the client's
// choice: it is answered ERR and the rest of it skipped, never fatal.
const maxLine = 4096

// Serve answers Squid's basic-auth helper requests from in on out until in
// ends: "[channel] username password" (each URL-escaped) per line, answered
// "[channel] OK" or "[channel] ERR message=<why>". A channel ID is there when
// Squid runs the helper with concurrency (SquidAuthConfig always does); a
// line that starts with a number is taken to carry one. Every line is
// answered, in order, whatever its bytes or length: a helper that exits takes
// its Squid down with it once it has restarted too often. Only a failure to
// read or to write ends it early.
func Serve(in io.Reader, out io.Writer, v *Verifier) error {
	r := bufio.NewReaderSize(in, maxLine)
	w := bufio.NewWriter(out)
	for {
		line, tooLong, err := readLine(r)
		if err == nil || line != "" || tooLong {
			if tooLong {
				fmt.Fprintln(w, refusal(channelOf(strings.Fields(line)), errLineTooLong))
			} else {
				fmt.Fprintln(w, answer(line, v))
			}
			// Squid waits for each answer: flush now, not when the buffer fills.
			if err := w.Flush(); err != nil {
				return fmt.Errorf("writing to squid: %w", err)
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("reading from squid: %w", err)
		}
	}
}

// errLineTooLong answers a line over maxLine.
var errLineTooLong = fmt.Errorf("request over %d bytes", maxLine)

// readLine returns r's next line without its line ending, or what precedes
// the end of r (err io.EOF). Of a line over maxLine it returns the first
// maxLine bytes and tooLong, having read the rest.
func readLine(r *bufio.Reader) (line string, tooLong bool, err error) {
	b, err := r.ReadSlice('\n')
	line = strings.TrimRight(string(b), "\r\n")
	for errors.Is(err, bufio.ErrBufferFull) {
		tooLong = true
		_, err = r.ReadSlice('\n')
	}
	return line, tooLong, err
}

// channelOf returns the channel ID that starts fields, with the space that
// follows it in an answer, or "" when the first field is not a number of at
// most 9 digits (Squid's IDs count its concurrent requests).
func channelOf(fields []string) string {
	if len(fields) == 0 || len(fields[0]) > 9 || strings.TrimLeft(fields[0], "0123456789") != "" {
		return ""
	}
	return fields[0] + " "
}

// refusal is an ERR answer on channel.
func refusal(channel string, why error) string {
	return channel + "ERR message=" + url.PathEscape(why.Error())
}

// answer is the reply to one request line.
func answer(line string, v *Verifier) string {
	fields := strings.Fields(line)
	channel := channelOf(fields)
	if channel != "" {
		fields = fields[1:]
	}
	if len(fields) != 2 {
		return refusal(channel, errors.New("want: [channel] username password"))
	}
	user, err1 := url.PathUnescape(fields[0])
	pass, err2 := url.PathUnescape(fields[1])
	if err1 != nil || err2 != nil {
		return refusal(channel, ErrMalformed)
	}
	if err := v.Check(user, pass); err != nil {
		return refusal(channel, err)
	}
	return channel + "OK"
}

// Poller keeps a Verifier's live list fresh from the operator.
type Poller struct {
	cfg    HelperConfig
	v      *Verifier
	client *http.Client
	clock  clock.WithTicker
	// errs receives each failed poll (nil: dropped), for logs and tests.
	errs func(error)
}

// NewPoller returns the poller of c's live list into v; a nil clock is the
// real one. errs, if not nil, is told each failed poll.
func NewPoller(c HelperConfig, v *Verifier, clk clock.WithTicker, errs func(error)) (*Poller, error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(c.CAPEM)) {
			return nil, errors.New("proxy auth helper config: caPEM holds no usable certificate")
		}
		tlsConfig.RootCAs = pool
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: nil, MaxIdleConns: 1},
	}
	if errs == nil {
		errs = func(error) {}
	}
	return &Poller{cfg: c, v: v, client: client, clock: clk, errs: errs}, nil
}

// Run polls every PollInterval until ctx ends (call Poll first for a list
// now).
func (p *Poller) Run(ctx context.Context) {
	every(ctx, p.clock, PollInterval, func() {
		if err := p.Poll(ctx); err != nil {
			p.errs(err)
		}
	})
}

// every calls f every d on clk until ctx ends.
func every(ctx context.Context, clk clock.WithTicker, d time.Duration, f func()) {
	t := clk.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			f()
		}
	}
}

// maxListBytes bounds a live list's body: a proxy has few live leases.
const maxListBytes = 1 << 20

// Poll reads the live list once and gives it to the verifier.
func (p *Poller) Poll(ctx context.Context) error {
	u, err := url.Parse(strings.TrimSuffix(p.cfg.OperatorURL, "/") + LivePath)
	if err != nil {
		return fmt.Errorf("live list URL: %w", err)
	}
	u.RawQuery = url.Values{"namespace": {p.cfg.Namespace}, "name": {p.cfg.Name}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("live list request: %w", err)
	}
	req.Header.Set("Authorization", AuthScheme+" "+ListToken(p.cfg.Key, p.cfg.Proxy(), p.clock.Now()))
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("polling the live list: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListBytes))
	if err != nil {
		return fmt.Errorf("reading the live list: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("polling the live list: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var l LiveList
	if err := json.Unmarshal(body, &l); err != nil {
		return fmt.Errorf("decoding the live list: %w", err)
	}
	p.v.SetLive(l)
	return nil
}

// RunHelper is the helper program: it reads its configuration from
// configPath, polls the live list when the configuration names the operator
// (once before it answers anything, then in the background), and answers
// Squid on in and out until in ends. logf receives what a helper writes to
// Squid's cache.log.
func RunHelper(ctx context.Context, configPath string, in io.Reader, out io.Writer, logf func(string, ...any)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	_, v, err := startVerifier(ctx, configPath, &wg, logf)
	if err != nil {
		return err
	}
	// Runs before wg.Wait: the poller stops when Squid does.
	defer cancel()
	return Serve(in, out, v)
}

// startVerifier reads the configuration at configPath and returns the
// verifier of its proxy, with its live list polled (once now, then in wg
// until ctx ends) when the configuration names the operator.
func startVerifier(ctx context.Context, configPath string, wg *sync.WaitGroup, logf func(string, ...any)) (HelperConfig, *Verifier, error) {
	raw, err := os.ReadFile(configPath)
	if err != nil {
		return HelperConfig{}, nil, err
	}
	cfg, err := ParseHelperConfig(raw)
	if err != nil {
		return HelperConfig{}, nil, err
	}
	v := NewVerifier(cfg, nil)
	if cfg.OperatorURL == "" {
		logf("proxy-auth-helper: no operator URL: a released lease's credentials work until they expire")
		return cfg, v, nil
	}
	p, err := NewPoller(cfg, v, nil, func(err error) { logf("proxy-auth-helper: %v", err) })
	if err != nil {
		return HelperConfig{}, nil, err
	}
	// A helper (re)started by Squid knows no released lease until its
	// first list: it answers nothing before it (Squid queues the
	// requests), and only an operator that does not answer within the
	// poll's timeout leaves it trusting signatures alone, as a stale list
	// does.
	if err := p.Poll(ctx); err != nil {
		logf("proxy-auth-helper: first poll: %v; until a poll succeeds, credentials work until they expire", err)
	}
	wg.Go(func() { p.Run(ctx) })
	return cfg, v, nil
}
