package gatewaybench

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// runClients is the child's work: a TLS origin of its own, and the clients
// of mode a.Mode through a.Proxy.
func runClients(a childArgs, stdin io.Reader, stdout io.Writer) (childResult, error) {
	body := make([]byte, bodyBytes)
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		_, _ = w.Write(body)
	}))
	// Tunnels closed before a handshake (latency, idle) are not errors here.
	origin.Config.ErrorLog = log.New(io.Discard, "", 0)
	origin.StartTLS()
	defer origin.Close()
	proxy, err := url.Parse(a.Proxy)
	if err != nil {
		return childResult{}, err
	}
	switch a.Mode {
	case "throughput":
		return throughput(a, proxy, origin), nil
	case "latency":
		return latency(a, proxy, origin), nil
	case "idle":
		return idle(a, proxy, origin, stdin, stdout), nil
	}
	return childResult{}, fmt.Errorf("unknown mode %q", a.Mode)
}

type firstError struct {
	once sync.Once
	msg  string
}

func (f *firstError) set(err error) { f.once.Do(func() { f.msg = err.Error() }) }

func throughput(a childArgs, proxy *url.URL, origin *httptest.Server) childResult {
	roots := x509.NewCertPool()
	roots.AddCert(origin.Certificate())
	var bytes, requests, errs atomic.Int64
	var first firstError
	deadline := time.Now().Add(time.Duration(a.Seconds) * time.Second)
	start := time.Now()
	var wg sync.WaitGroup
	for range a.Clients {
		wg.Go(func() {
			hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy),
				TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
			for time.Now().Before(deadline) {
				resp, err := hc.Get(origin.URL + "/1mib")
				if err != nil {
					errs.Add(1)
					first.set(err)
					continue
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != bodyBytes {
					errs.Add(1)
					first.set(fmt.Errorf("body of %d bytes: %v", n, err))
					continue
				}
				bytes.Add(n)
				requests.Add(1)
			}
		})
	}
	wg.Wait()
	return childResult{BytesPerSec: float64(bytes.Load()) / time.Since(start).Seconds(), Requests: int(requests.Load()),
		Errors: int(errs.Load()), FirstError: first.msg}
}

// connect opens a tunnel to target through proxy and returns it once the
// proxy answered 200.
func connect(proxy *url.URL, target string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", proxy.Host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if proxy.User != nil {
		p, _ := proxy.User.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(proxy.User.Username()+":"+p)) + "\r\n"
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, errors.New("CONNECT: " + resp.Status)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func latency(a childArgs, proxy *url.URL, origin *httptest.Server) childResult {
	target := origin.Listener.Addr().String()
	var first firstError
	errs := 0
	var took []time.Duration
	for i := range a.N + 20 {
		start := time.Now()
		c, err := connect(proxy, target)
		d := time.Since(start)
		if err != nil {
			errs++
			first.set(err)
			continue
		}
		c.Close()
		if i >= 20 { // warm-up
			took = append(took, d)
		}
		time.Sleep(2 * time.Millisecond) // new tunnels one after another, not a flood
	}
	slices.Sort(took)
	q := func(p float64) time.Duration {
		if len(took) == 0 {
			return 0
		}
		return took[min(len(took)-1, int(p*float64(len(took))))]
	}
	return childResult{P50: q(0.50), P99: q(0.99), Requests: len(took), Errors: errs, FirstError: first.msg}
}

func idle(a childArgs, proxy *url.URL, origin *httptest.Server, stdin io.Reader, stdout io.Writer) childResult {
	target := origin.Listener.Addr().String()
	var mu sync.Mutex
	var conns []net.Conn
	var first firstError
	next := make(chan struct{}, a.N)
	for range a.N {
		next <- struct{}{}
	}
	close(next)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range next {
				c, err := connect(proxy, target)
				if err != nil {
					first.set(err)
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Fprintln(stdout, "HELD")
	_, _ = io.Copy(io.Discard, stdin) // until the parent has measured
	for _, c := range conns {
		c.Close()
	}
	return childResult{Opened: len(conns), FirstError: first.msg}
}
