// A Sarama client for isrsim's client tests (built in GOPATH mode against Debian's Sarama source).
//
//	sarama-client metadata BOOTSTRAP TOPIC          prints "broker ID HOST:PORT" and "partition P leader L isr N"
//	sarama-client produce BOOTSTRAP TOPIC N RATE    idempotent acks=all, keyed records with a header; prints
//	                                                "acked KEY" per acknowledgement and "produced A of N"
//	sarama-client consume BOOTSTRAP TOPIC GROUP N   a group member; commits what it reads; stops after N
//	                                                distinct keys; prints "consumed KEY" and "consumed-total D"
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V2_1_0_0
	c.ClientID = "isrsim-sarama"
	c.Metadata.Retry.Max = 20
	c.Metadata.Retry.Backoff = 500 * time.Millisecond
	return c
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func metadata(bootstrap, topic string) {
	client, err := sarama.NewClient(strings.Split(bootstrap, ","), config())
	if err != nil {
		fail("client: %v", err)
	}
	defer client.Close()
	for _, b := range client.Brokers() {
		fmt.Printf("broker %d %s\n", b.ID(), b.Addr())
	}
	parts, err := client.Partitions(topic)
	if err != nil {
		fail("partitions: %v", err)
	}
	for _, p := range parts {
		leader, err := client.Leader(topic, p)
		if err != nil {
			fail("leader: %v", err)
		}
		isr, _ := client.InSyncReplicas(topic, p)
		fmt.Printf("partition %d leader %d isr %d\n", p, leader.ID(), len(isr))
	}
}

func produce(bootstrap, topic string, n int, rate float64) {
	c := config()
	c.Producer.Idempotent = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Retry.Max = 1000
	c.Producer.Retry.Backoff = 200 * time.Millisecond
	c.Producer.Timeout = 10 * time.Second
	c.Net.MaxOpenRequests = 1
	p, err := sarama.NewAsyncProducer(strings.Split(bootstrap, ","), c)
	if err != nil {
		fail("producer: %v", err)
	}
	acked := 0
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for m := range p.Successes() {
			acked++
			fmt.Printf("acked %s\n", m.Key)
		}
	}()
	go func() {
		defer wg.Done()
		for e := range p.Errors() {
			fmt.Fprintf(os.Stderr, "error %s: %v\n", e.Msg.Key, e.Err)
		}
	}()
	gap := time.Duration(float64(time.Second) / rate)
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("key-%06d", i)
		p.Input() <- &sarama.ProducerMessage{
			Topic:   topic,
			Key:     sarama.StringEncoder(key),
			Value:   sarama.StringEncoder("value-" + strconv.Itoa(i)),
			Headers: []sarama.RecordHeader{{Key: []byte("client"), Value: []byte("sarama")}},
		}
		time.Sleep(gap)
	}
	p.AsyncClose()
	wg.Wait()
	fmt.Printf("produced %d of %d\n", acked, n)
}

type handler struct {
	want int
	seen map[string]bool
	done context.CancelFunc
	mu   sync.Mutex
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		ok := len(m.Headers) == 1 && string(m.Headers[0].Key) == "client" && string(m.Headers[0].Value) == "sarama"
		if !ok {
			fail("record %s without its header", m.Key)
		}
		h.mu.Lock()
		if !h.seen[string(m.Key)] {
			h.seen[string(m.Key)] = true
			fmt.Printf("consumed %s\n", m.Key)
		}
		n := len(h.seen)
		h.mu.Unlock()
		s.MarkMessage(m, "")
		if n >= h.want {
			h.done()
		}
	}
	return nil
}

func consume(bootstrap, topic, group string, n int) {
	c := config()
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.CommitInterval = 200 * time.Millisecond
	// A retention makes this Sarama commit with OffsetCommit v2: v0-1 are gone from Kafka 4 (KIP-896).
	c.Consumer.Offsets.Retention = 24 * time.Hour
	c.Consumer.Return.Errors = false
	g, err := sarama.NewConsumerGroup(strings.Split(bootstrap, ","), group, c)
	if err != nil {
		fail("group: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	h := &handler{want: n, seen: map[string]bool{}, done: cancel}
	for ctx.Err() == nil {
		if err := g.Consume(ctx, []string{topic}, h); err != nil {
			fmt.Fprintf(os.Stderr, "consume: %v\n", err)
			time.Sleep(500 * time.Millisecond)
		}
	}
	// Close leaves the group; the marked offsets were committed every CommitInterval (the test checks them).
	if err := g.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "close: %v\n", err)
	}
	fmt.Printf("consumed-total %d\n", len(h.seen))
}

func main() {
	if len(os.Args) < 4 {
		fail("usage: sarama-client metadata|produce|consume BOOTSTRAP TOPIC ...")
	}
	mode, bootstrap, topic := os.Args[1], os.Args[2], os.Args[3]
	atoi := func(s string) int {
		v, err := strconv.Atoi(s)
		if err != nil {
			fail("%v", err)
		}
		return v
	}
	switch mode {
	case "metadata":
		metadata(bootstrap, topic)
	case "produce":
		rate, _ := strconv.ParseFloat(os.Args[5], 64)
		produce(bootstrap, topic, atoi(os.Args[4]), rate)
	case "consume":
		consume(bootstrap, topic, os.Args[4], atoi(os.Args[5]))
	default:
		fail("unknown mode %s", mode)
	}
}
