// Comms of the NCCL-style data path: SendComm and RecvComm over one UCX worker per device.
//
// Matching: NCCL requires sends and receives on a comm to match in posting order; a tag only picks
// which buffer of a multi-receive a send lands in. Both sides count messages per NCCL tag, and the
// UCX tag is [receiver tag space:20][NCCL tag:32][per-tag sequence:12], so the j-th send with tag t
// always lands in the j-th posted receive buffer with tag t. UCX moves the bytes (eager or
// rendezvous, zero-copy into the posted buffer where the transport allows).
//
// Failure: errors are sticky per comm. A peer that dies is seen through the UCX endpoint error
// handler or through the control socket (EOF without BYE); every request of the comm then
// completes with kRemoteError. All state is guarded by the device mutex.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "transport/control_socket.h"
#include "transport/device_ctx.h"
#include "transport/request.h"

namespace pact::transport {

// What regMr hands out: a cache region pinned by this handle, tied to one comm's device.
struct MemHandle {
  static constexpr uint32_t kMagic = 0x524d4350;  // "PCMR"
  uint32_t magic = kMagic;
  std::shared_ptr<DeviceCtx> dev;
  std::shared_ptr<ucx::Region> region;
  ~MemHandle() { magic = 0; }
};

class Comm {
 public:
  static constexpr uint32_t kMagic = 0x4d4d4f43;  // "COMM"
  Comm(std::shared_ptr<DeviceCtx> dev, ControlSocket sock, size_t poolSize, bool isSend,
       std::string peer);
  virtual ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  uint32_t magic = kMagic;
  DeviceCtx& dev() { return *dev_; }
  const std::shared_ptr<DeviceCtx>& devPtr() const { return dev_; }
  bool isSend() const { return isSend_; }
  Status error() const { return error_; }
  // Records the first failure (sticky) and logs it once, naming the peer. Safe inside UCX callbacks.
  void fail(Status s, const std::string& why);
  // Test one request: progress, liveness, completion. Device mutex must be held.
  Status test(Request* r, bool* done, int* sizes);
  // Cancels what is in flight and says goodbye. Device mutex must be held.
  virtual void shutdown() = 0;

  RequestPool& pool() { return *pool_; }
  uint32_t nextSeq(int tag) { return seq_[tag]++; }
  const std::string& peer() const { return peer_; }

 protected:
  // Failure was recorded: cancel/abort what UCX still holds so every part completes.
  virtual void abortInFlight() = 0;
  void checkPeer();
  // Progresses until no part is owned by UCX (bounded); parts UCX still holds after that keep
  // their pool alive in the device's graveyard, so a late callback never touches freed memory.
  void drainParts();
  void sayBye();

  std::shared_ptr<DeviceCtx> dev_;
  ControlSocket sock_;
  std::unique_ptr<RequestPool> pool_;  // handed to the device if UCX still holds parts at close
  bool isSend_;
  std::string peer_;
  Status error_ = Status::kOk;
  bool aborted_ = false;
  bool byeReceived_ = false;
  TimePoint byeAt_{};
  TimePoint nextLivenessCheck_{};
  std::unordered_map<int, uint32_t> seq_;
};

class SendComm final : public Comm {
 public:
  SendComm(std::shared_ptr<DeviceCtx> dev, ControlSocket sock, uint32_t tagSpace, std::string peer);
  ~SendComm() override;
  // Creates the UCX endpoint to the receiver's worker (non-blocking; wire-up continues in progress).
  Status connectEndpoint(const std::vector<uint8_t>& remoteWorkerAddress);
  // Posts a send; *out = nullptr when the request pool is full (retry later).
  Status isend(const void* data, size_t size, int tag, MemHandle* mh, Request** out);
  void shutdown() override;
  ucx::Endpoint& endpoint() { return ep_; }

 private:
  void abortInFlight() override;
  ucx::Endpoint ep_;
  uint32_t tagSpace_;
};

class RecvComm final : public Comm {
 public:
  RecvComm(std::shared_ptr<DeviceCtx> dev, ControlSocket sock, uint32_t tagSpace, std::string peer);
  ~RecvComm() override;
  Status irecv(int n, void* const* data, const size_t* sizes, const int* tags,
               MemHandle* const* mhs, Request** out);
  void shutdown() override;

 private:
  void abortInFlight() override;
  uint32_t tagSpace_;
};

uint64_t makeTag(uint32_t tagSpace, int tag, uint32_t seq);

}  // namespace pact::transport
