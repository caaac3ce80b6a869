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
  // "ip:port" of a probe address.
  static std::string describe(const wire::ProbeAddress& a);

 private:
  RailProber();
  void run();
  void answer(int fd);           // reads every datagram waiting on fd: probes echoed, echoes noted
  void probeDue(int64_t t);      // sends the probes that are due and judges silences
  int socketFor(const std::string& ip, wire::ProbeAddress* out);

  struct Socket {
    std::string ip;
    ScopedFd fd;
    wire::ProbeAddress address;
  };
  std::mutex mu_;
  std::vector<Socket> sockets_;
  std::vector<std::weak_ptr<RailWatch>> watches_;
  uint64_t nextId_ = 1;
  ScopedFd epoll_, wake_;  // wake_: an eventfd that ends the thread's wait
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace pact::transport
