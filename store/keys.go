package store

import (
	"hash/fnv"
	"strconv"
)

// Key layout. Every key is namespace, then the shard's hash tag, then a
// suffix, so that all keys of one shard live in one Redis Cluster slot and
// one script touches one slot:
//
//	herald:{3}:meta          HASH  id -> record JSON (no payload, no history)
//	herald:{3}:payload       HASH  id -> payload bytes
//	herald:{3}:hist          HASH  id -> JSON array of attempts
//	herald:{3}:due:push      ZSET  id -> due time (ms): work for the dispatchers
//	herald:{3}:due:pull.T    ZSET  id -> due time (ms): work for topic T's consumers
//	herald:{3}:reserved      ZSET  id -> reservation deadline (ms)
//	herald:{3}:dead:T        ZSET  id -> time of death (ms), per topic
//	herald:{3}:finished      ZSET  id -> expiry time (ms) of a succeeded or cancelled record
//	herald:{3}:stats         HASH  "T:scheduled" ... -> count
//	herald:{3}:topics        SET   topic names seen in the shard
//	herald:wake              pub/sub channel: "queue shard due_ms" when a shard's head moves earlier
type keys struct {
	ns     string
	shards int
}

// QueuePush is the queue of every notification the dispatchers deliver
// themselves (webhook, sms, poll).
const QueuePush = "push"

// PullQueue returns the queue of a pull topic: its consumers (HTTP workers or
// a library-mode handler) reserve from it.
func PullQueue(topic string) string { return "pull." + topic }

func (k keys) shardOf(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(k.shards))
}

func (k keys) prefix(shard int) string {
	return k.ns + ":{" + strconv.Itoa(shard) + "}:"
}

func (k keys) meta(shard int) string     { return k.prefix(shard) + "meta" }
func (k keys) payload(shard int) string  { return k.prefix(shard) + "payload" }
func (k keys) hist(shard int) string     { return k.prefix(shard) + "hist" }
func (k keys) reserved(shard int) string { return k.prefix(shard) + "reserved" }
func (k keys) finished(shard int) string { return k.prefix(shard) + "finished" }
func (k keys) stats(shard int) string    { return k.prefix(shard) + "stats" }
func (k keys) topics(shard int) string   { return k.prefix(shard) + "topics" }

func (k keys) due(shard int, queue string) string { return k.prefix(shard) + "due:" + queue }

func (k keys) dead(shard int, topic string) string { return k.prefix(shard) + "dead:" + topic }

func (k keys) wake() string { return k.ns + ":wake" }
