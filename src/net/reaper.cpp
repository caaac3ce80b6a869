#include "net/reaper.h"

#include <malloc.h>

#include <algorithm>

namespace pact::net {

namespace {
// Hands freed heap back to the system. Not under AddressSanitizer: its allocator replaces
// glibc's, whose malloc_trim then walks an arena nobody set up (a SIGSEGV in mtrim, or a hang).
void trimHeap() {
#if defined(__SANITIZE_ADDRESS__)
  return;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return;
#endif
#endif
  malloc_trim(0);
}
}  // namespace

Reaper::~Reaper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Reaper::add(const std::shared_ptr<Hub>& hub) {
  std::lock_guard lock(mu_);
  const auto until = now() + kLinger;
  auto it = std::find_if(items_.begin(), items_.end(), [&](const Item& i) { return i.hub == hub; });
  if (it != items_.end())
    it->until = until;
  else
    items_.push_back(Item{hub, until});
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  cv_.notify_one();
}

void Reaper::pass(std::vector<Item>& items) {
  sessions_->step();
  const auto t = now();
  const bool closing = sessions_->closing() > 0;
  bool emptied = false;
  std::erase_if(items, [&](Item& i) {
    std::lock_guard lock(i.hub->dev().mutex());
    const bool work = i.hub->stepBackground() > 0 || closing;
    if (work && t < i.until) return false;
    emptied = i.hub->trimIfIdle() || emptied;
    return true;
  });
  // The last comm of a context is gone and its teardown done: hand what the burst of comms
  // freed back to the system (glibc keeps freed heap otherwise; megabytes per 10,000 comms).
  if (emptied) trimHeap();
}

void Reaper::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (items_.empty()) {
      cv_.wait(lock, [&] { return stop_ || !items_.empty(); });
      continue;
    }
    std::vector<Item> items;
    items.swap(items_);
    lock.unlock();
    pass(items);
    lock.lock();
    // Items added meanwhile are in items_ already; keep the later deadline of a hub in both.
    for (Item& i : items) {
      auto it = std::find_if(items_.begin(), items_.end(), [&](const Item& o) { return o.hub == i.hub; });
      if (it == items_.end())
        items_.push_back(std::move(i));
      else
        it->until = std::max(it->until, i.until);
    }
    if (!items_.empty()) cv_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stop_; });
  }
}

bool Reaper::settle(const std::vector<std::shared_ptr<Hub>>& hubs, std::chrono::milliseconds limit,
                    bool awaitPeers) {
  const auto deadline = now() + limit;
  for (;;) {
    sessions_->step();
    size_t work = awaitPeers ? sessions_->closing() : 0;
    for (auto& h : hubs) {
      std::lock_guard lock(h->dev().mutex());
      work += h->stepBackground();
    }
    if (work == 0) {
      bool emptied = false;
      for (auto& h : hubs) {
        std::lock_guard lock(h->dev().mutex());
        emptied = h->trimIfIdle() || emptied;
      }
      if (emptied) trimHeap();
      return true;
    }
    if (now() >= deadline) return false;
  }
}

}  // namespace pact::net
