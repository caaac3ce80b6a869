// One traffic class's plugin instance and comm for `mix --face nccl`; see mix_nccl_link.h.
#include "mix_nccl_link.h"

#include "peer.h"
#include "report.h"

#include <algorithm>
#include <cstring>

namespace pact::perf {

HostBuffer::HostBuffer(size_t bytes) : size_(bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<size_t>(bytes, 4096)) != 0)
    die("cannot allocate " + formatSize(bytes) + " of buffer");
  std::memset(p, 0, bytes);
  p_.reset(static_cast<char*>(p));
}

ClassLink::~ClassLink() {
  // A comm still open here means the run is ending on an error path that did not die (none
  // today); closing it keeps the plugin's finalize from waiting on it.
  if (comm_ != nullptr) close();
}

void ClassLink::open(const std::string& path, int version, bool verbose) {
  std::string err;
  net_ = loader::NetPlugin::open(path, version, &err);
  if (!net_) die(err);
  if (net_->version() < 10) {
    die(std::string("--face nccl: ") + path + " is used as ncclNetPlugin_v" +
        std::to_string(net_->version()) +
        ", which carries no traffic class (v10 passes it in connect, v11+ in init): both "
        "streams would share one class. Use --version 10..12 or a plugin that exports them");
  }
  const std::string what = std::string("init (") + name_ + " class " + std::to_string(tc_) + ")";
  check(net_->init(tc_, !verbose), what.c_str());
}

void ClassLink::connect(int rank, int dev, const HostBuffer& buf) {
  rank_ = rank;
  char handle[loader::kHandleSize] = {};
  const std::string what = std::string(name_) + " class " + std::to_string(tc_);
  if (rank == 1) {
    void* listen_comm = nullptr;
    check(net_->listen(dev, handle, &listen_comm), ("listen (" + what + ")").c_str());
    if (listen_comm == nullptr) die("listen (" + what + ") returned a NULL listenComm");
    ctlSend(handle, sizeof(handle));
    while (comm_ == nullptr) check(net_->accept(listen_comm, &comm_), ("accept (" + what + ")").c_str());
    check(net_->closeListen(listen_comm), "closeListen");
  } else {
    ctlRecv(handle, sizeof(handle));
    while (comm_ == nullptr) check(net_->connect(dev, handle, &comm_), ("connect (" + what + ")").c_str());
  }
  check(net_->regMr(comm_, buf.data(), buf.size(), loader::kPtrHost, &mh_),
        ("regMr (" + what + ")").c_str());
}

void ClassLink::close() {
  if (mh_ != nullptr) check(net_->deregMr(comm_, mh_), "deregMr");
  mh_ = nullptr;
  if (comm_ != nullptr)
    check(rank_ == 0 ? net_->closeSend(comm_) : net_->closeRecv(comm_), rank_ == 0 ? "closeSend" : "closeRecv");
  comm_ = nullptr;
}

}  // namespace pact::perf
