// One traffic class of `pact-perf mix --face nccl` as NCCL gives it to a net plugin: a plugin
// instance of its own, initialised with the class's trafficClass (v11+: a context per class, as
// NCCL gives each communicator one; v10: the class travels in connect's config), and per phase
// one fresh comm to the peer with its registered buffer (NCCL's step slots: one region cut into
// slots). Rank 0 holds the send comm, rank 1 the receive comm.
#pragma once

#include "net_plugin.h"

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>

namespace pact::perf {

// Page-aligned host memory, faulted in at allocation (nothing timed pays for it).
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t bytes);
  char* data() const { return p_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> p_;
  size_t size_ = 0;
};

class ClassLink {
 public:
  // name: the stream's name for messages ("bulk", "latency"); tc: the NCCL trafficClass.
  ClassLink(const char* name, int tc) : name_(name), tc_(tc) {}
  ClassLink(const ClassLink&) = delete;
  ClassLink& operator=(const ClassLink&) = delete;
  ~ClassLink();

  // dlopen (a second open of the same library shares it) and init with this class; dies with
  // the reason on failure, and when the version has no way to carry a traffic class (v8, v9).
  void open(const std::string& path, int version, bool verbose);
  loader::NetPlugin& net() { return *net_; }
  const char* name() const { return name_; }
  int trafficClass() const { return tc_; }

  // A fresh comm for one phase: rank 1 listens and sends the handle over the control channel,
  // then accepts; rank 0 connects. Polls without blocking, as NCCL's proxy does; dies on any
  // plugin error (the caller's watchdog bounds the time). Then registers buf (host memory).
  void connect(int rank, int dev, const HostBuffer& buf);
  void* comm() const { return comm_; }
  void* mhandle() const { return mh_; }
  // deregMr and closeSend / closeRecv; the caller made sure nothing is in flight.
  void close();

 private:
  const char* name_;
  int tc_;
  int rank_ = 0;
  std::unique_ptr<loader::NetPlugin> net_;
  void* comm_ = nullptr;
  void* mh_ = nullptr;
};

}  // namespace pact::perf
