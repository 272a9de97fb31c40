#pragma once
// The one path by which a connection's PDUs leave: every outbound PDU is queued here as
// iovecs pointing at its header slot and at its payload where it already lies, and the
// coalescing scheduler decides when the queued group goes out in one sendmsg().
#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "coalesce/scheduler.h"
#include "reactor/reactor.h"

namespace sens::transport {

class TlsChannel;

// Called once every byte of a PDU has been handed to the kernel, so the PDU's header slot and
// payload buffer may be reused.
struct SentCallback {
  void (*fn)(void* ctx, uint64_t arg) = nullptr;
  void* ctx = nullptr;
  uint64_t arg = 0;
};

// Where a deferred data digest may come from without reading the bytes (a RAM namespace's
// table of block CRCs): fn(ctx, bytes, len, &crc) sets crc and returns true, or returns false
// and the queue digests the bytes. It runs at the moment the digest is sealed.
struct DigestSource {
  bool (*fn)(const void* ctx, const void* bytes, size_t len, uint32_t* crc) = nullptr;
  const void* ctx = nullptr;
};

struct SendCounters {
  uint64_t sendmsg_calls = 0;  // every sendmsg() attempt, EAGAIN included
  uint64_t bytes = 0;
  uint64_t eagain = 0;
  uint64_t snapshot_bytes = 0;       // bytes of changeable payload copied because they had to wait
  uint64_t digest_source_bytes = 0;  // payload bytes whose data digest a DigestSource gave
  uint64_t control_first = 0;        // control PDUs moved ahead of waiting PDUs (socket full)
  uint64_t refused_sealed = 0;  // PDUs offered after the last one (an owner bug: none expected)
};

class SendQueue final : public PassEndHandler {
 public:
  // `on_blocked(true)` asks the owner to watch EPOLLOUT, `on_blocked(false)` to stop.
  // `on_error(errno)` reports a dead socket (the owner closes the connection).
  struct Owner {
    virtual ~Owner() = default;
    virtual void want_writable(bool on) = 0;
    virtual void on_send_error(int err) = 0;
    // Work under way that will queue PDUs without this connection's pending ones leaving
    // first (the adaptive policy holds a group only for arrivals that can come).
    virtual uint32_t pdus_in_progress() const { return UINT32_MAX; }
  };

  SendQueue(Reactor& reactor, const coalesce::Config& config, Owner& owner);
  ~SendQueue();
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  void set_fd(int fd) { fd_ = fd; }
  // Sends through TLS from now on: the channel packs the committed PDUs into records of up to
  // 16 KiB, so a coalesced group leaves in shared records, with one send() per batch. On the
  // kernel's records the plain sendmsg() path serves (the kernel seals what it is given).
  void set_tls(TlsChannel* tls);
  // Changes the policy (e.g. an admin queue that must never delay: Policy::kOff).
  void set_config(const coalesce::Config& config);
  // The same, keeping the counters (a live retune): what is queued leaves first, the next
  // group follows the new configuration.
  void retune(const coalesce::Config& config);
  void reset_counters();

  // Queues one PDU made of `n` iovecs. `sent` runs once all its bytes are in the kernel.
  // `bytes` of the PDU count towards the byte cap. May send at once (policy, urgency, caps).
  // False once the queue is sealed: nothing was queued and `sent` never runs.
  // `second` > 0: iov[second..n) is a second PDU of the same class, queued with the first in
  // one call (a read's data and its response); `sent` runs once both are in the kernel.
  // Policies that count each PDU against B or send each alone (off, uniform, semantic) take
  // them as two calls would.
  bool enqueue(const iovec* iov, int n, coalesce::PduClass cls, SentCallback sent = {},
               int second = -1);
  // Queues the connection's last PDU (a C2HTermReq, a Disconnect's response) and seals the
  // queue: it takes nothing more, so that PDU is the last on the wire and its callback (which
  // closes the connection) runs after every other one.
  bool enqueue_last(const iovec* iov, int n, coalesce::PduClass cls, SentCallback sent);
  bool sealed() const { return sealed_; }
  // The same, where iov[changeable] points at memory that may change once this call returns
  // (a RAM namespace's blocks, sent without a copy). While the socket takes bytes, the queue
  // sends them in the same loop pass, with nothing between; should it have to wait (socket
  // full), it first copies what is left of them to `stable` (as large as that iovec), so a
  // write that lands meanwhile cannot change bytes half sent.
  // `digest`, if set, is where the CRC32C of iov[changeable] goes (the PDU's data digest, one
  // of its later iovecs): it is computed just before those bytes first leave or are copied,
  // so it describes the bytes sent even when a write changes the memory while the PDU waits
  // in its group, and it reads them while they are about to be in cache for the send.
  // `digest_source`, if given, is asked first at that same moment (see DigestSource).
  // `second`: as for enqueue(), the changeable iovec in the first PDU.
  bool enqueue_changeable(const iovec* iov, int n, int changeable, void* stable,
                          coalesce::PduClass cls, SentCallback sent = {},
                          uint32_t* digest = nullptr, DigestSource digest_source = {},
                          int second = -1);

  // Sends everything queued now (connection closing, or an owner-level decision).
  void flush(coalesce::FlushReason reason);
  // The connection is closing: drops what is queued (no callbacks run) and never touches the
  // descriptor again, whose number the kernel may hand to someone else.
  void shutdown();
  // The socket became writable again: resume a partial send.
  void on_writable();
  // Eager/adaptive: the reactor pass ended; the scheduler says whether the group leaves now.
  void on_pass_end() override;

  bool idle() const { return head_ == iov_.size(); }
  size_t queued_bytes() const { return queued_bytes_; }
  const coalesce::Scheduler& scheduler() const { return scheduler_; }
  coalesce::Scheduler& scheduler() { return scheduler_; }
  const SendCounters& counters() const { return counters_; }

 private:
  struct Entry {
    iovec iov;
    SentCallback sent;           // fires when this iovec (the PDU's last) is fully sent
    void* stable = nullptr;      // where to copy this iovec's bytes before they wait (or null)
    uint32_t* digest = nullptr;  // where this iovec's CRC32C goes before its bytes leave
    bool pdu_start = false;      // the first iovec of a PDU (PDUs are never split or interleaved)
    DigestSource digest_source;  // asked for `digest` before the bytes are read
  };
  // Socket full: where a new control PDU goes so that it leaves before the PDUs of other
  // commands that have not started to be sent (after the PDU being sent, and after control
  // PDUs moved there before it, so they keep their order).
  size_t control_slot() const;
  void snapshot_waiting();     // the socket is full: copies every changeable iovec still queued
  void seal_digest(Entry& e);  // computes a deferred data digest (once)
  void commit(coalesce::FlushReason reason);
  void send_committed();
  // scratch_ = the committed iovecs from the first byte not yet sent, at most `max_iovs` of
  // them, stopping once `max_bytes` are listed (deferred digests are sealed as listed).
  size_t list_committed(size_t max_iovs, size_t max_bytes);
  void wait_writable();  // the socket is full: copy what may change, ask for EPOLLOUT
  // One batch of TLS records; false when the loop must stop (blocked or dead).
  bool send_tls();
  void account_sent(size_t sent);  // runs the callbacks of the PDUs now fully sent
  void rearm_timer();
  void on_timer();

  Reactor& reactor_;
  Owner& owner_;
  int fd_ = -1;
  coalesce::Scheduler scheduler_;
  Timer timer_;
  std::vector<Entry> iov_;  // [head_, committed_) ready to send; [committed_, end) the open group
  size_t head_ = 0;
  size_t committed_ = 0;
  size_t head_offset_ = 0;  // bytes of iov_[head_] already sent
  size_t queued_bytes_ = 0;
  bool blocked_ = false;  // waiting for EPOLLOUT
  bool in_send_ = false;  // re-entrancy guard: callbacks may enqueue
  bool dead_ = false;
  bool sealed_ = false;         // the last PDU is queued (enqueue_last)
  size_t control_end_ = 0;      // end of the control PDUs moved to the front (socket full)
  std::vector<iovec> scratch_;  // the iovec array handed to sendmsg
  TlsChannel* tls_ = nullptr;
  SendCounters counters_;
};

}  // namespace sens::transport
