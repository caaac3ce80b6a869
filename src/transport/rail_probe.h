// Rail liveness between two processes: one UDP echo per rail, from a thread of its own.
//
// A rail's UCX connection over TCP says nothing when its link goes down or black-holes: the
// kernel retransmits for minutes and the sends just stop completing. Waiting for the application
// to progress is no probe either (a receiver busy with a kernel answers nothing). So each process
// that uses several rails binds one UDP socket per rail address and a thread that answers every
// probe it receives at once (the kernel and this thread only) and sends probes for the rails its
// comms watch: every quarter of the timeout while the rail is up, with capped exponential backoff
// (from a quarter of the timeout up to kMaxProbeInterval, no attempt limit) while it is out.
//
// A watch is the path from one local rail address to one peer rail address, shared by every comm
// over it. It is up until neither a probe was answered nor its comms saw data move over it for the
// timeout (taken out: down), and up again
// once a probe is answered after a hold-down: the timeout at first, doubled for each time the
// rail went down within kFlapMemory of coming up (capped at kMaxHold), so a flapping rail is
// taken back no faster than that. A starved prober thread (a loop that ran late by more than half
// the timeout) starts the silence anew rather than taking rails out for its own delay.
//
// Thread-safe. Watch states are atomics read by the comms; everything else is under mu_.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/scoped_fd.h"
#include "common/status.h"
#include "transport/wire.h"

namespace pact::transport {

class RailProber;
class AckSource;

// One local rail address to one peer rail address, as the prober sees it.
class RailWatch {
 public:
  bool up() const { return up_.load(std::memory_order_acquire); }
  // Times the rail was taken out / taken back so far.
  uint64_t downs() const { return downs_.load(std::memory_order_relaxed); }
  uint64_t ups() const { return ups_.load(std::memory_order_relaxed); }
  // Time the rail has spent out so far, the current outage included.
  std::chrono::microseconds downTime() const;
  std::chrono::microseconds timeout() const { return std::chrono::microseconds(timeoutNs_ / 1000); }
  // Data moved over the rail just now (a piece landed, or a send completed): as good as an
  // answered probe while the rail is up, so a link whose queue delays probes past the timeout
  // (a congested, rate-limited one) is not taken out while it carries traffic.
  void heard() { heard_.store(nowNs(), std::memory_order_relaxed); }
  static int64_t nowNs();
  // The peer's rail, as "ip:port".
  const std::string& name() const { return name_; }

 private:
  friend class RailProber;
  friend class AckSource;
  RailWatch(int64_t timeoutNs, std::string name) : timeoutNs_(timeoutNs), name_(std::move(name)) {}
  const int64_t timeoutNs_;
  const std::string name_;
  std::atomic<bool> up_{true};
  std::atomic<uint64_t> downs_{0}, ups_{0};
  std::atomic<int64_t> downSince_{0};   // ns, while out
  std::atomic<int64_t> downTotal_{0};   // ns, past outages
  std::atomic<int64_t> heard_{0};       // ns, the last heard()
  // The prober thread's own (under its mutex).
  int sock = -1;
  sockaddr_storage remote{};
  socklen_t remoteLen = 0;
  uint64_t id = 0;
  int64_t lastReply = 0, nextProbe = 0, interval = 0, lastUp = 0, hold = 0;
  int flaps = 0;
};

// Acknowledgements of a failed-over comm's messages (transport/rail_set.h) ride the probes' sockets, not
// the session's control connection, which lives on rail 0's addresses and dies with it. The
// receiver's AckSource tells the sender's AckSink, per NCCL tag, that every message below a count
// was reported; each change goes at once over the first live rail, and the prober thread sends the
// latest again every kAckInterval for kAckRepeat after it changed, so a lost datagram costs a
// probe interval, not a message.
class AckSink {
 public:
  uint64_t id() const { return id_; }
  // Whether the receiver acknowledged the seq-th message of tag.
  bool acked(uint32_t tag, uint32_t seq) const;

 private:
  friend class RailProber;
  explicit AckSink(uint64_t id) : id_(id) {}
  void update(uint32_t tag, uint32_t upTo);
  const uint64_t id_;
  mutable std::mutex mu_;
  std::vector<std::pair<uint32_t, uint32_t>> upTo_;  // (tag, messages below it acknowledged)
};

// Messages of at most this many bytes are acknowledged lazily: the receiver's call that reports
// one does not send the datagram itself (a later call does, flush(), once kLazyBatch are due or
// the oldest is kLazyAge old, or else the prober thread within a few ms), and a sender completes
// such a message at once from a copy it keeps until the acknowledgement comes (net::SendComm's
// kept copies), so no small message waits for a round trip of its own, the receiver's answer to
// it leaves before the acknowledgement does, and a stream of small messages costs one datagram
// per kLazyBatch of them (at most kLazyBatch x kLazyAckMax bytes of copies wait for it).
inline constexpr size_t kLazyAckMax = size_t{64} << 10;
inline constexpr uint32_t kLazyBatch = 16;
inline constexpr std::chrono::microseconds kLazyAge{500};

class AckSource {
 public:
  // The seq-th message of tag was reported: acknowledged once every earlier one of the tag was,
  // at once (now) or lazily (kLazyAckMax).
  void delivered(uint32_t tag, uint32_t seq, bool now = true);
  // Sends the lazy acknowledgements if kLazyBatch are waiting or the oldest is kLazyAge old (the
  // receiver's calls; cheap when none is), or whatever is waiting (all: a comm that closes).
  void flush(bool all = false) {
    const uint32_t n = lazy_.load(std::memory_order_relaxed);
    if (n != 0 && (all || n >= kLazyBatch ||
                   RailWatch::nowNs() - lazySince_.load(std::memory_order_relaxed) >=
                       std::chrono::nanoseconds(kLazyAge).count()))
      sendLazy();
  }

 private:
  friend class RailProber;
  // A path: the watch of the sender's rail (its state, and this side's socket on the rail) and
  // where on that rail the sender reads acknowledgements.
  struct Path {
    std::shared_ptr<RailWatch> watch;
    sockaddr_storage to{};
    socklen_t toLen = 0;
  };
  AckSource(uint64_t sink, std::vector<Path> paths) : sink_(sink), paths_(std::move(paths)) {}
  void sendLazy();
  void sendAll() const;  // every tag's latest (mu_ held)
  void send(uint32_t tag, uint32_t upTo) const;  // over the first live path
  // The prober thread: what delivered() left to it now, and the latest again every kAckInterval.
  void repeat(int64_t t) const;
  struct Tag {
    uint32_t tag = 0;
    uint32_t next = 0;               // messages below it acknowledged
    std::vector<uint32_t> ahead;     // reported above a gap
  };
  const uint64_t sink_;
  const std::vector<Path> paths_;  // to the sender's acknowledgement sockets, by rail
  mutable std::atomic<uint32_t> lazy_{0};   // lazy acknowledgements due
  std::atomic<int64_t> lazySince_{0};       // ns: when the oldest of them was due
  mutable std::mutex mu_;
  std::vector<Tag> tags_;
  int64_t changed_ = 0;  // ns
  mutable int64_t repeated_ = 0;  // ns: the prober thread's last repeat
};

class RailProber {
 public:
  static constexpr auto kMaxProbeInterval = std::chrono::seconds(1);
  static constexpr auto kMaxHold = std::chrono::seconds(2);
  static constexpr auto kFlapMemory = std::chrono::seconds(30);

  // The process's prober, made on first use and shared while anyone holds it (its thread stops
  // with the last holder).
  static std::shared_ptr<RailProber> acquire();
  ~RailProber();
  RailProber(const RailProber&) = delete;
  RailProber& operator=(const RailProber&) = delete;

  // The UDP address this process answers probes on for its rail address ip (a numeric IPv4 or
  // IPv6 address; the socket is bound on first use).
  Result<wire::ProbeAddress> listen(const std::string& ip);
  // The watch of the path from local rail address ip to the peer's probe address, shared with
  // every other caller asking for the same pair while one holds it (the first caller's timeout).
  Result<std::shared_ptr<RailWatch>> watch(const std::string& ip, const wire::ProbeAddress& remote,
                                           std::chrono::microseconds timeout);
  // "ip:port" of a probe address ("[ip]:port" for IPv6), and its IP alone.
  static std::string describe(const wire::ProbeAddress& a);
  static std::string ipOf(const wire::ProbeAddress& a);
  // A sender's sink of acknowledgements (its id goes to the receiver in the handshake), and a
  // receiver's source of them to the sink `sink` over `paths` (watches of the sender's rails).
  std::shared_ptr<AckSink> ackSink();
  // to[r]: where the sender reads acknowledgements on rail r (its ackAddress), watched by paths[r].
  std::shared_ptr<AckSource> ackSource(uint64_t sink, const std::vector<std::shared_ptr<RailWatch>>& paths,
                                       const std::vector<wire::ProbeAddress>& to);
  // Where this process reads acknowledgements on its rail address ip: a socket of its own that the
  // prober thread never reads (the sender's test() reads it, drainAcks), so an acknowledgement
  // waits for no thread to be scheduled (bound on first use).
  Result<wire::ProbeAddress> ackAddress(const std::string& ip);
  // Reads the acknowledgements waiting on this process's ack sockets and hands them to their sinks.
  void drainAcks();
  void wake();  // ends the thread's wait now
  static constexpr auto kAckRepeat = std::chrono::seconds(2);
  static constexpr auto kAckInterval = std::chrono::milliseconds(20);

 private:
  RailProber();
  void run();
  void answer(int fd);           // reads every datagram waiting on fd: probes echoed, echoes noted
  void probeDue(int64_t t);      // sends the probes that are due and judges silences
  int socketFor(const std::string& ip, wire::ProbeAddress* out);
  // A non-blocking UDP socket bound on ip (port chosen by the kernel), its address in *out.
  static ScopedFd bindUdp(const std::string& ip, wire::ProbeAddress* out);
  void dispatchAck(const void* packet);  // mu_ held

  struct Socket {
    std::string ip;
    ScopedFd fd;
    wire::ProbeAddress address;
  };
  std::mutex mu_;
  std::vector<Socket> sockets_;
  std::vector<Socket> ackSockets_;  // not in the epoll set: read by drainAcks only
  std::vector<std::weak_ptr<RailWatch>> watches_;
  std::vector<std::weak_ptr<AckSink>> sinks_;
  std::vector<std::weak_ptr<AckSource>> sources_;
  uint64_t nextId_ = 1;
  ScopedFd epoll_, wake_;  // wake_: an eventfd that ends the thread's wait
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace pact::transport
