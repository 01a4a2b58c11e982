package sitebench

import (
	"net/http"
	"sync"
	"time"
)

// origin behaves as a protected site: it answers 429 to a request when more
// than rate requests arrived in the last second (every arrival counts,
// refused ones too), or when the proxy it came through (its Via) has more
// than perProxy requests in flight; else 200 after latency. It counts its
// answers per second since start.
type origin struct {
	latency  time.Duration
	perProxy int
	start    time.Time

	mu       sync.Mutex
	rate     int
	arrivals []time.Time
	inFlight map[string]int
	// seconds[i] are the answers in second i since start.
	seconds []answers
}

type answers struct{ ok, limited int }

func newOrigin(rate, perProxy int, latency time.Duration) *origin {
	return &origin{rate: rate, perProxy: perProxy, latency: latency, start: time.Now(), inFlight: map[string]int{}}
}

// setRate changes the allowed rate from now on.
func (o *origin) setRate(r int) {
	o.mu.Lock()
	o.rate = r
	o.mu.Unlock()
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	via := r.Header.Get("Via")
	now := time.Now()
	o.mu.Lock()
	cut := 0
	for cut < len(o.arrivals) && now.Sub(o.arrivals[cut]) >= time.Second {
		cut++
	}
	o.arrivals = append(o.arrivals[cut:], now)
	limited := len(o.arrivals) > o.rate || o.inFlight[via] >= o.perProxy
	if !limited {
		o.inFlight[via]++
	}
	o.mu.Unlock()
	if limited {
		o.count(now, false)
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	time.Sleep(o.latency)
	o.mu.Lock()
	o.inFlight[via]--
	o.mu.Unlock()
	o.count(now, true)
	_, _ = w.Write([]byte("page\n"))
}

func (o *origin) count(at time.Time, ok bool) {
	i := int(at.Sub(o.start) / time.Second)
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.seconds) <= i {
		o.seconds = append(o.seconds, answers{})
	}
	if ok {
		o.seconds[i].ok++
	} else {
		o.seconds[i].limited++
	}
}

// span sums the answers of seconds [from, to).
func (o *origin) span(from, to int) answers {
	o.mu.Lock()
	defer o.mu.Unlock()
	var a answers
	for i := max(from, 0); i < to && i < len(o.seconds); i++ {
		a.ok += o.seconds[i].ok
		a.limited += o.seconds[i].limited
	}
	return a
}

// share is the 429s' share of a's answers.
func (a answers) share() float64 {
	if a.ok+a.limited == 0 {
		return 0
	}
	return float64(a.limited) / float64(a.ok+a.limited)
}
