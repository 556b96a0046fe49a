package store

import (
	"hash/fnv"
	"strconv"

	"github.com/heraldhq/herald/notify"
)

// Key layout. Every key is the namespace, then the shard's hash tag, then a
// suffix, so that all keys of one shard live in one Redis Cluster slot and
// one script touches one slot:
//
//	herald:{3}:job          HASH  id -> content: header line + encoded body + payload (codec.go), written once
//	herald:{3}:st           HASH  id -> state line (codec.go); absent while a new notification waits for its first attempt
//	herald:{3}:hist         HASH  "id|n" -> attempt n's history entry (JSON), appended, never rewritten
//	herald:{3}:due:push     ZSET  id -> due time (ms): work for the dispatchers
//	herald:{3}:due:pull.T   ZSET  id -> due time (ms): work for topic T's consumers
//	herald:{3}:ready:Q      LIST  ids of queue Q's notifications that were due when enqueued, oldest first; an entry whose notification has moved on is skipped
//	herald:{3}:reserved     ZSET  id -> reservation deadline (ms)
//	herald:{3}:dead         ZSET  id -> time of death (ms), every topic: the dead-letter listing, swept past Config.DeadRetention
//	herald:{3}:dead:T       ZSET  id -> time of death (ms), topic T: replay and purge by topic
//	herald:{3}:finished     ZSET  "ua|id id ..." -> expiry time (ms): the succeeded records of one finish call (or one cancelled record), ua its time
//	herald:{3}:stats        HASH  "T:scheduled", "T:reserved", "T:dead", "T:succeeded_total", "T:failed_attempts_total" -> count
//	herald:{3}:act:M        HASH  "T|ok", "T|fail", "T|lat|B", and "@E|..." the same for endpoint E -> attempts in minute M (Unix minutes), expiring
//	herald:{3}:quarantine   HASH  id -> why, and the content that could not be decoded
//	herald:{3}:order        HASH  "T|key" -> the last notification of order key key in topic T that has not ended
//	herald:{3}:link         HASH  "n|id" -> the notification waiting right behind id; "p|id" -> the one id waits behind
//	herald:{3}:given:R      STRING a Reserve call of receipt prefix R whose answer was lost has been given back; it then reserves nothing if it arrives late (expires after 20 minutes)
//	herald:started:H:Q      STRING the highest number of queue Q's notifications reserved ahead by the Store whose receipts start with H that may have started (Store.Start); expires 7 days after the last
//	herald:wake             pub/sub channel: "queue shard due_ms" when a shard's head moves earlier
//	herald:meta             HASH  "shards" -> the namespace's shard count, recorded at first use
type keys struct {
	ns     string
	shards int
	// prefixes caches each shard's prefix, once shards is known (setShards):
	// every batch names keys of its shards.
	prefixes []string
}

// setShards sets the shard count and caches the shards' prefixes.
func (k *keys) setShards(n int) {
	k.shards = n
	k.prefixes = make([]string, n)
	for shard := range k.prefixes {
		k.prefixes[shard] = k.ns + ":{" + strconv.Itoa(shard) + "}:"
	}
}

// QueuePush is the queue of every notification the dispatchers deliver
// themselves (webhook, sms, poll).
const QueuePush = "push"

// PullQueue returns the queue of a pull topic: its consumers (HTTP workers or
// a library-mode handler) reserve from it.
func PullQueue(topic string) string { return "pull." + topic }

// shardOf is the shard an id belongs to: where its record is, or, for a
// notification with an order key, where a stub points to its key's shard.
func (k *keys) shardOf(id string) int { return k.hash(id) }

// shardFor is the shard a notification lives in: its key's, for one with an
// order key, so that the notifications of one key, and their line, share a
// slot; its id's otherwise.
func (k *keys) shardFor(n *notify.Notification) int {
	if n.OrderKey != "" {
		return k.hash(n.Topic + "\x00" + n.OrderKey)
	}
	return k.hash(n.ID)
}

func (k *keys) hash(s string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return int(h.Sum32() % uint32(k.shards))
}

func (k *keys) prefix(shard int) string {
	if shard < len(k.prefixes) {
		return k.prefixes[shard]
	}
	return k.ns + ":{" + strconv.Itoa(shard) + "}:"
}

func (k *keys) job(shard int) string        { return k.prefix(shard) + "job" }
func (k *keys) state(shard int) string      { return k.prefix(shard) + "st" }
func (k *keys) hist(shard int) string       { return k.prefix(shard) + "hist" }
func (k *keys) reserved(shard int) string   { return k.prefix(shard) + "reserved" }
func (k *keys) deadAll(shard int) string    { return k.prefix(shard) + "dead" }
func (k *keys) finished(shard int) string   { return k.prefix(shard) + "finished" }
func (k *keys) stats(shard int) string      { return k.prefix(shard) + "stats" }
func (k *keys) quarantine(shard int) string { return k.prefix(shard) + "quarantine" }
func (k *keys) order(shard int) string      { return k.prefix(shard) + "order" }
func (k *keys) link(shard int) string       { return k.prefix(shard) + "link" }

func (k *keys) due(shard int, queue string) string { return k.prefix(shard) + "due:" + queue }

func (k *keys) ready(shard int, queue string) string { return k.prefix(shard) + "ready:" + queue }

func (k *keys) dead(shard int, topic string) string { return k.prefix(shard) + "dead:" + topic }

// givenBack marks the Reserve call of receipt given back, in the slot of
// shard's counters, where that call's script looks for it.
func (k *keys) givenBack(shard int, receipt string) string {
	return k.prefix(shard) + "given:" + receipt
}

func (k *keys) started(holder, queue string) string {
	return k.ns + ":started:" + holder + ":" + queue
}

func (k *keys) activity(shard int, minute int64) string {
	return k.prefix(shard) + "act:" + strconv.FormatInt(minute, 10)
}

func (k *keys) wake() string { return k.ns + ":wake" }

func (k *keys) meta() string { return k.ns + ":meta" }

// histField names attempt n's entry of id's history; "|" cannot occur in an
// id, so the field is unambiguous.
func histField(id string, n int) string { return id + "|" + strconv.Itoa(n) }
