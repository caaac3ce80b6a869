#include "ucx/reg_cache.h"

#include <unistd.h>

#include "common/log.h"

namespace pact::ucx {

Result<std::shared_ptr<Region>> RegCache::acquire(const RegRequest& req) {
  if (req.type != MemoryType::kHost || req.dmabufFd >= 0)
    return Error{Status::kUnsupported,
                 "registration of GPU or dmabuf memory needs a UCX built with CUDA/dmabuf support"};
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto addr = reinterpret_cast<uintptr_t>(req.addr);
  if (req.addr == nullptr && req.length != 0)
    return Error{Status::kInvalidArgument, "registration of a NULL address"};
  if (addr + req.length < addr) return Error{Status::kInvalidArgument, "registration wraps around"};
  const size_t len = req.length == 0 ? 1 : req.length;

  std::lock_guard lock(mu_);
  // Any live region starting at or before addr may cover it.
  for (auto it = byStart_.upper_bound(addr); it != byStart_.begin();) {
    --it;
    if (auto region = it->second.lock(); region && region->covers(addr, len, req.type)) {
      ++hits_;
      return region;
    }
  }
  purgeExpiredLocked();
  auto region = std::make_shared<Region>();
  region->start = addr & ~(page - 1);
  region->end = (addr + len + page - 1) & ~(page - 1);
  region->type = req.type;
  auto map = MemMap::map(ctx_, reinterpret_cast<void*>(region->start), region->end - region->start,
                         UCS_MEMORY_TYPE_HOST);
  if (!map.ok()) return map.error();
  region->map = std::move(map.value());
  byStart_.emplace(region->start, region);
  ++misses_;
  PACT_DEBUG("regcache: mapped [%#lx, %#lx)", static_cast<unsigned long>(region->start),
             static_cast<unsigned long>(region->end));
  return region;
}

void RegCache::purgeExpiredLocked() {
  for (auto it = byStart_.begin(); it != byStart_.end();)
    it = it->second.expired() ? byStart_.erase(it) : std::next(it);
}

RegCache::Stats RegCache::stats() const {
  std::lock_guard lock(mu_);
  Stats s;
  for (const auto& [start, weak] : byStart_) s.live += weak.expired() ? 0 : 1;
  s.hits = hits_;
  s.misses = misses_;
  return s;
}

}  // namespace pact::ucx
