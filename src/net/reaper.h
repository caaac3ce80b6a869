// Reaper: the background half of closing. closeSend/closeRecv return at once; what a close still
// needs (UCX finishing or cancelling the operations of the closed comm, shared endpoints closing
// once their last comm is gone, the acknowledgements a receiver owes the sender, the goodbyes
// that let tag spaces be recycled) happens here: a thread that, while such work exists,
// progresses the hubs that have it and steps the sessions, every millisecond, for at most
// kLinger after the last close that asked for it. Everything it gives up on is counted and
// logged by its owner (DeviceCtx, Sessions).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "net/hub.h"
#include "transport/session.h"

namespace pact::net {

class Reaper {
 public:
  static constexpr auto kLinger = std::chrono::seconds(2);
  explicit Reaper(std::shared_ptr<transport::Sessions> sessions) : sessions_(std::move(sessions)) {}
  ~Reaper();
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // A close on hub left work behind (or may have): progress it for up to kLinger from now.
  void add(const std::shared_ptr<Hub>& hub);
  // Runs the background work of the hubs now, until none is left or limit passes (what a
  // resource count wants to see settled). awaitPeers: also until every peer has said goodbye
  // to the channels closed here (a process that leaves). Returns whether none is left.
  bool settle(const std::vector<std::shared_ptr<Hub>>& hubs, std::chrono::milliseconds limit,
              bool awaitPeers = false);

 private:
  struct Item {
    std::shared_ptr<Hub> hub;
    TimePoint until;
  };
  void run();
  // One pass: progresses each hub with work; drops those done or past their time.
  void pass(std::vector<Item>& items);

  std::shared_ptr<transport::Sessions> sessions_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Item> items_;
  bool stop_ = false;
  std::thread thread_;  // started by the first add()
};

}  // namespace pact::net
