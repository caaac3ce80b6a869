// Net: the version-independent core behind the NCCL net plugin. Its semantics are those of the
// newest NCCL net API; the shims in plugin/nccl only convert types. Every entry point is
// non-blocking, returns a Status (never throws across the ABI), and may be called concurrently
// from NCCL's service thread (listen/connect/accept/regMr/deregMr/close) and progress thread
// (isend/irecv/test/iflush): each device's mutex serializes UCX use.
#pragma once

#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "transport/params.h"
#include "net/comm.h"
#include "net/credits.h"
#include "net/hub.h"
#include "net/reaper.h"
#include "transport/fabric.h"
#include "transport/memory.h"
#include "transport/session.h"

namespace pact::net {

struct Properties {
  std::string name;
  std::string pciPath;  // empty = no PCI device (NULL for NCCL)
  uint64_t guid = 0;
  int ptrSupport = 0;   // NCCL_PTR_* bits
  int regIsGlobal = 0;
  int forceFlush = 0;
  int speedMbps = 0;
  int port = 0;
  float latencyUs = 0;
  int maxComms = 0;
  int maxRecvs = 1;
  std::vector<int> vDevs;  // members (a physical device lists itself)
  size_t maxP2pBytes = 0;
  size_t maxCollBytes = 0;
  int maxMultiRequestSize = 1;
  int railId = -1;
  int planeId = -1;
  transport::MemorySupport memory;  // what ptrSupport was decided from, with the reasons
};

class ListenComm;

// What bounds the comms one process can hold, for maxComms and pact-info.
struct CommLimits {
  int maxComms = 0;
  std::string reason;  // which bound is the tightest, with the numbers
};

class Net {
 public:
  // What the plugin holds: open comms, registrations, requests of closed comms UCX still holds.
  struct Resources {
    int64_t comms = 0, registrations = 0, orphanedRequests = 0;
  };
  Resources resources() const;
  // Parses PACT_* (once), discovers devices. Errors name the variable or device at fault.
  static Result<std::shared_ptr<Net>> create(const Params& params);
  ~Net();
  // Finishes background teardown (bounded by limit) before resources() counts: what a check
  // that nothing is left wants to see. awaitPeers: see Reaper::settle.
  void settle(std::chrono::milliseconds limit, bool awaitPeers = false);
  CommLimits limits() const;

  int deviceCount() const;
  Status properties(int dev, Properties* out) const;
  // Fuses physical devices into a virtual one appended after the physical devices (and earlier
  // virtual ones); *dev receives its index. Members must be distinct physical devices.
  Status makeVDevice(const std::vector<int>& members, int* dev);

  // trafficClass: NCCL's (-1 = unset): picks the class's profile (PACT_TC_<n> or DEFAULT), hence
  // the UCX service context and the channel of the comms.
  // handle: kHandleSize bytes, filled for the peer. A listen comm is a listen id on the
  // process's one session listener of the device, not a socket of its own.
  Status listen(int dev, int trafficClass, void* handle, ListenComm** out);
  // Steps the connection; *out stays nullptr until it is established. handle's scratch bytes
  // hold the in-progress state between calls, as NCCL re-passes the same handle.
  Status connect(int dev, int trafficClass, void* handle, SendComm** out);
  Status accept(ListenComm* lc, RecvComm** out);

  // The calls below act on comms, requests and handles only, so they need no Net instance (and no
  // global lock on the data path); they stay valid for comms that outlive their Net.

  static Status regMr(Comm* comm, void* data, size_t size, ucx::MemoryType type, int dmabufFd,
               uint64_t dmabufOffset, MemHandle** out);
  static Status deregMr(Comm* comm, MemHandle* mh);
  static Status isend(SendComm* comm, void* data, size_t size, int tag, MemHandle* mh, Request** out);
  static Status irecv(RecvComm* comm, int n, void** data, const size_t* sizes, const int* tags,
               MemHandle** mhs, Request** out);
  // Host memory needs no flush: *out = nullptr.
  static Status iflush(RecvComm* comm, int n, void** data, const int* sizes, MemHandle** mhs, Request** out);
  // sizes: n entries for a receive, one for a send, may be null. ending (may be null): filled
  // once, when the request ends here (done, or an error), with the face's record (then
  // closed in the request) and how it travelled.
  static Status test(Request* r, bool* done, int* sizes, Ending* ending = nullptr);
  // Return at once; what UCX still holds of the comm finishes in the background.
  static Status closeSend(SendComm* comm);
  static Status closeRecv(RecvComm* comm);
  static Status closeListen(ListenComm* lc);

  const Params& params() const { return params_; }
  // A copy: makeVDevice may grow the device list from another thread.
  ucx::DeviceInfo deviceInfo(int dev) const { return fabric_->deviceInfo(dev); }

 private:
  explicit Net(const Params& p) : params_(p) {}
  // The hub of the device context serving this class on dev (the fabric's context; one per
  // distinct service), made on first use and kept for the Net's life.
  Result<std::shared_ptr<Hub>> hub(int dev, int trafficClass);
  // The channel a class's send comms use (profile + the PACT_FAULT lane delay).
  ChannelConfig channelFor(int trafficClass) const;
  // NCCL's trafficClass as the class's name: "DEFAULT" (-1) or the number ("3").
  static std::string className(int trafficClass) { return trafficClass < 0 ? "DEFAULT" : std::to_string(trafficClass); }
  // Rail failover (transport/rail_set.h): the process's prober and this side's probe addresses for a comm
  // on dev; null (and no addresses) when failover is off or dev has one rail. The Net keeps the
  // prober from its first use to its end, so a peer's watch is answered between comms too.
  // acks (may be null): where this side reads acknowledgements (a sender's).
  std::shared_ptr<transport::RailProber> railProber(DeviceCtx& dev, std::vector<wire::ProbeAddress>* probes,
                                                    std::vector<wire::ProbeAddress>* acks = nullptr);

  Params params_;
  std::unique_ptr<transport::Fabric> fabric_;
  std::shared_ptr<Sessions> sessions_;
  std::shared_ptr<Reaper> reaper_;
  CreditBook credits_;  // the classes' budgets per peer process (credits)
  mutable std::mutex hubsMu_;
  std::map<const DeviceCtx*, std::shared_ptr<Hub>> hubs_;
  std::shared_ptr<transport::RailProber> prober_;  // under hubsMu_
};

}  // namespace pact::net
