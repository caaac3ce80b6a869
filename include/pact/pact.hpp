/**
 * @file pact.hpp
 * @brief Header-only C++20 RAII over the transfer engine's C API (pact.h).
 *
 * Everything here is a thin inline layer over pact.h and inherits its contract: every call is
 * thread-safe (one engine lock), calls marked "blocking" progress the engine themselves up to
 * their timeout, the commit hook runs on the progressing thread with the engine lock held.
 *
 * Everything is in namespace pact::xfer (pact's internal types live in namespace pact; the two
 * never collide, so one file may include both).
 *
 * Errors: nothing here throws. A call that can fail returns pact::xfer::Result<T> (a value or a
 * pact::xfer::Error); Result<void> carries only the error. Both are [[nodiscard]]; drop an error
 * on purpose with ignore(). The Error's message is pact_last_error() taken on the failing thread
 * right after the call, so it stays valid however long the Error is kept.
 *
 * Ownership: Engine owns a pact_engine_t, MemoryRegion a pact_mr_t, Group a pact_group_t; all three
 * are move-only and free their handle in the destructor. A MemoryRegion or Group must be destroyed
 * before the Engine it came from (moving the Engine object is fine: the handle does not change).
 * Transfer and peer ids stay plain numbers (pact_xfer_t, pact_peer_t), as in the C API.
 */
#pragma once

#include <pact/pact.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <variant>

namespace pact::xfer {

/** A failed call: its status (negative) and the engine's message naming what was wrong. */
class Error {
 public:
  Error(pact_status_t status, std::string message)
      : status_(status), message_(std::move(message)) {}
  /** Captures pact_last_error() of this thread for status. */
  static Error last(pact_status_t status) { return Error(status, pact_last_error()); }

  pact_status_t status() const { return status_; }
  const std::string& message() const { return message_; }
  /** "PACT_ERR_NOT_FOUND: <message>". */
  std::string str() const {
    std::string s = pact_status_string(status_);
    if (!message_.empty()) s += ": " + message_;
    return s;
  }

 private:
  pact_status_t status_;
  std::string message_;
};

/** A value or an Error (std::expected is C++23). Check ok() before value(). */
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  /** The value; only when ok(). */
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  /** The error; only when !ok(). */
  const Error& error() const { return std::get<1>(v_); }
  pact_status_t status() const { return ok() ? PACT_OK : error().status(); }
  void ignore() const {}

 private:
  std::variant<T, Error> v_;
};

/** Success or an Error. */
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::make_unique<Error>(std::move(error))) {}  // NOLINT

  bool ok() const { return error_ == nullptr; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *error_; }
  pact_status_t status() const { return ok() ? PACT_OK : error_->status(); }
  void ignore() const {}

 private:
  std::unique_ptr<Error> error_;  // null = OK: success allocates nothing
};

namespace detail {
inline Result<void> check(pact_status_t s) {
  if (s < 0) return Error::last(s);
  return {};
}
}  // namespace detail

/** Engine options (pact_engine_config_t with C++ types). */
struct EngineConfig {
  std::string name;            ///< shown to peers; empty = "pact-<pid>"
  std::string listen_ip;       ///< empty = do not listen
  uint16_t listen_port = 0;    ///< 0 = chosen by the kernel
  uint64_t model_epoch = 0;    ///< the receiver's current epoch
  uint64_t credit_budget = 0;  ///< bytes advertised at once; 0 = unlimited (config only)
  bool progress_thread = false;  ///< true: an engine thread progresses; false: call progress()
};

/** The sender's view of a receiver's credit (pact_peer_credit). */
struct Credit {
  uint64_t budget = 0;  ///< what the receiver granted this engine (0 = no limit)
  uint64_t in_use = 0;  ///< this engine's advertised-but-unfinished bytes to it
};

class MemoryRegion;
class Group;

/**
 * Callable commit hook: return true to commit, false to reject (PACT_ERR_REJECTED). Runs on the
 * progressing thread with the engine lock held: it must not call into the same engine.
 */
using CommitFunction = std::function<bool(pact_xfer_t xfer, const pact_key_t& key,
                                          pact_peer_t from, std::span<const pact_block_t> blocks)>;

/** Owns a pact_engine_t. Move-only; the destructor calls pact_engine_destroy (see pact.h). */
class Engine {
 public:
  /** Creates an engine (pact_engine_create). */
  static Result<Engine> create(const EngineConfig& c) {
    pact_engine_config_t cfg;
    pact_engine_config_init(&cfg);
    cfg.name = c.name.empty() ? nullptr : c.name.c_str();
    cfg.listen_ip = c.listen_ip.empty() ? nullptr : c.listen_ip.c_str();
    cfg.listen_port = c.listen_port;
    cfg.model_epoch = c.model_epoch;
    cfg.credit_budget = c.credit_budget;
    cfg.progress_thread = c.progress_thread ? 1 : 0;
    pact_engine_t e = nullptr;
    if (pact_status_t s = pact_engine_create(&cfg, &e); s < 0) return Error::last(s);
    return Engine(e);
  }

  Engine() = default;
  Engine(Engine&& o) noexcept
      : e_(std::exchange(o.e_, nullptr)), hook_(std::move(o.hook_)) {}
  Engine& operator=(Engine&& o) noexcept {
    if (this != &o) {
      reset();
      e_ = std::exchange(o.e_, nullptr);
      hook_ = std::move(o.hook_);
    }
    return *this;
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  /** Blocking (bounded): aborts open transfers, closes peers, frees everything. */
  ~Engine() { reset(); }
  void reset() {
    if (e_ != nullptr) pact_engine_destroy(std::exchange(e_, nullptr));
    hook_.reset();  // after destroy: no progress can call it any more
  }

  pact_engine_t get() const { return e_; }
  explicit operator bool() const { return e_ != nullptr; }

  /** "ip:port" for other engines' connect(); PACT_ERR_NOT_FOUND when not listening. */
  Result<std::string> address() const {
    char buf[128];
    if (pact_status_t s = pact_engine_address(e_, buf, sizeof buf); s < 0) return Error::last(s);
    return std::string(buf);
  }
  /** Progresses once; sleeps up to timeout_ms when idle. Blocking. */
  void progress(int timeout_ms = 0) const { (void)pact_progress(e_, timeout_ms); }

  /** Connects to the engine at address. Blocking up to timeout_ms. */
  Result<pact_peer_t> connect(const std::string& address, int timeout_ms) const {
    pact_peer_t p = 0;
    if (pact_status_t s = pact_connect(e_, address.c_str(), timeout_ms, &p); s < 0)
      return Error::last(s);
    return p;
  }
  /** Waits for a peer named name. Blocking up to timeout_ms. */
  Result<pact_peer_t> waitPeer(const std::string& name, int timeout_ms) const {
    pact_peer_t p = 0;
    if (pact_status_t s = pact_peer_wait(e_, name.c_str(), timeout_ms, &p); s < 0)
      return Error::last(s);
    return p;
  }
  Result<Credit> peerCredit(pact_peer_t peer) const {
    Credit c;
    if (pact_status_t s = pact_peer_credit(e_, peer, &c.budget, &c.in_use); s < 0)
      return Error::last(s);
    return c;
  }

  /** Registers host memory [addr, addr + length); the region must be destroyed before this engine. */
  Result<MemoryRegion> registerMemory(void* addr, size_t length) const;
  /** Registers host or GPU memory as desc describes (pact_mem_register_ex). */
  Result<MemoryRegion> registerMemory(const pact_mem_desc_t& desc) const;

  // ---- receiver ----
  Result<void> setEpoch(uint64_t epoch) const { return detail::check(pact_set_epoch(e_, epoch)); }
  /** Installs a C hook (user must outlive the engine or the next setCommitHook). */
  Result<void> setCommitHook(pact_commit_fn fn, void* user) {
    Result<void> r = detail::check(pact_set_commit_hook(e_, fn, user));
    if (r.ok()) hook_.reset();  // the engine no longer calls the callable one
    return r;
  }
  /**
   * Installs a callable hook, kept by this object. Replacing it is safe while another thread
   * progresses: the engine lock guarantees the old one is not running once the call returns.
   */
  Result<void> setCommitHook(CommitFunction fn) {
    auto holder = std::make_unique<CommitFunction>(std::move(fn));
    Result<void> r = detail::check(pact_set_commit_hook(e_, &Engine::trampoline, holder.get()));
    if (r.ok()) hook_ = std::move(holder);
    return r;
  }
  /** peer 0 = the engine's total budget; 0 bytes = no (per-peer) limit. */
  Result<void> setCredit(pact_peer_t peer, uint64_t budget) const {
    return detail::check(pact_set_credit(e_, peer, budget));
  }
  Result<pact_xfer_t> expect(const pact_key_t& key, std::span<const pact_block_t> blocks,
                             uint64_t deadline_us = 0, const char* traffic_class = nullptr) const {
    pact_xfer_t x = 0;
    if (pact_status_t s = pact_expect(e_, &key, blocks.data(), blocks.size(), deadline_us,
                                      traffic_class, &x);
        s < 0)
      return Error::last(s);
    return x;
  }

  // ---- sender ----
  Result<pact_xfer_t> send(pact_peer_t peer, const pact_key_t& key,
                           std::span<const pact_block_t> blocks, uint64_t deadline_us = 0,
                           const char* traffic_class = nullptr) const {
    pact_xfer_t x = 0;
    if (pact_status_t s = pact_send(e_, peer, &key, blocks.data(), blocks.size(), deadline_us,
                                    traffic_class, &x);
        s < 0)
      return Error::last(s);
    return x;
  }

  // ---- both sides ----
  Result<pact_xfer_info_t> query(pact_xfer_t xfer) const {
    pact_xfer_info_t i{};
    if (pact_status_t s = pact_xfer_query(e_, xfer, &i); s < 0) return Error::last(s);
    return i;
  }
  /** Blocking until final or timeout_ms (PACT_ERR_TIMED_OUT). */
  Result<pact_xfer_info_t> wait(pact_xfer_t xfer, int timeout_ms) const {
    pact_xfer_info_t i{};
    if (pact_status_t s = pact_xfer_wait(e_, xfer, timeout_ms, &i); s < 0) return Error::last(s);
    return i;
  }
  /** Ends interest in xfer (aborts it if open). True: gone, its blocks are free; false
   *  (PACT_IN_PROGRESS): a UCX operation still touches them, wait() on the id until final. */
  Result<bool> release(pact_xfer_t xfer) const {
    const pact_status_t s = pact_xfer_release(e_, xfer);
    if (s < 0) return Error::last(s);
    return s == PACT_OK;
  }

  /** A group over peers[rank]; must be destroyed before this engine. */
  Result<Group> createGroup(uint64_t group_id, std::span<const pact_peer_t> peers,
                            uint32_t my_rank) const;

  Result<pact_stats_t> stats() const {
    pact_stats_t st{};
    if (pact_status_t s = pact_stats(e_, &st); s < 0) return Error::last(s);
    return st;
  }
  /** Copies trace events after *cursor into out; returns how many. */
  size_t readTrace(std::span<pact_event_t> out, uint64_t* cursor) const {
    return pact_trace_read(e_, out.data(), out.size(), cursor);
  }

 private:
  explicit Engine(pact_engine_t e) : e_(e) {}
  static int trampoline(void* user, pact_xfer_t xfer, const pact_key_t* key, pact_peer_t from,
                        const pact_block_t* blocks, size_t count) {
    auto& fn = *static_cast<CommitFunction*>(user);
    return fn(xfer, *key, from, std::span<const pact_block_t>(blocks, count)) ? 0 : 1;
  }

  pact_engine_t e_ = nullptr;
  std::unique_ptr<CommitFunction> hook_;  // heap: its address survives moves of the Engine
};

/** Owns a pact_mr_t. Move-only; the destructor deregisters (errors dropped: see deregister()). */
class MemoryRegion {
 public:
  MemoryRegion() = default;
  MemoryRegion(pact_engine_t e, pact_mr_t mr, void* addr, size_t length)
      : e_(e), mr_(mr), addr_(static_cast<uint8_t*>(addr)), length_(length) {}
  MemoryRegion(MemoryRegion&& o) noexcept { *this = std::move(o); }
  MemoryRegion& operator=(MemoryRegion&& o) noexcept {
    if (this != &o) {
      deregister().ignore();
      e_ = std::exchange(o.e_, nullptr);
      mr_ = std::exchange(o.mr_, nullptr);
      addr_ = std::exchange(o.addr_, nullptr);
      length_ = std::exchange(o.length_, 0);
    }
    return *this;
  }
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  /** A registration still in use (PACT_ERR_BUSY) stays with the engine, which frees it at
   * destroy (with a warning) and shows in open_registrations until then; call deregister() to
   * see that error. */
  ~MemoryRegion() { deregister().ignore(); }

  /** Deregisters now. PACT_ERR_BUSY while an unreleased transfer uses it (the region is kept, so
   * the call can be repeated after progress). */
  Result<void> deregister() {
    if (mr_ == nullptr) return {};
    Result<void> r = detail::check(pact_mem_deregister(e_, mr_));
    if (r.ok() || r.status() != PACT_ERR_BUSY) mr_ = nullptr;
    return r;
  }

  pact_mr_t get() const { return mr_; }
  uint8_t* data() const { return addr_; }
  size_t size() const { return length_; }
  /** The block [offset, offset + length) of this region. */
  pact_block_t block(uint64_t offset, uint64_t length) const { return {mr_, offset, length}; }

 private:
  pact_engine_t e_ = nullptr;
  pact_mr_t mr_ = nullptr;
  uint8_t* addr_ = nullptr;
  size_t length_ = 0;
};

inline Result<MemoryRegion> Engine::registerMemory(void* addr, size_t length) const {
  pact_mr_t mr = nullptr;
  if (pact_status_t s = pact_mem_register(e_, addr, length, &mr); s < 0) return Error::last(s);
  return MemoryRegion(e_, mr, addr, length);
}

inline Result<MemoryRegion> Engine::registerMemory(const pact_mem_desc_t& desc) const {
  pact_mr_t mr = nullptr;
  if (pact_status_t s = pact_mem_register_ex(e_, &desc, &mr); s < 0) return Error::last(s);
  return MemoryRegion(e_, mr, desc.addr, desc.length);
}

/** Owns a pact_group_t (one step at a time). Move-only; the destructor destroys the group. */
class Group {
 public:
  Group() = default;
  explicit Group(pact_group_t g) : g_(g) {}
  Group(Group&& o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
  Group& operator=(Group&& o) noexcept {
    if (this != &o) {
      reset();
      g_ = std::exchange(o.g_, nullptr);
    }
    return *this;
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() { reset(); }
  void reset() {
    if (g_ != nullptr) pact_group_destroy(std::exchange(g_, nullptr));
  }
  pact_group_t get() const { return g_; }

  /** Starts step (epoch, generation): send[r] goes to rank r, recv[r] comes from it. */
  Result<void> step(uint64_t model_epoch, uint32_t generation, std::span<const pact_block_t> send,
                    std::span<const pact_block_t> recv, uint64_t deadline_us = 0) const {
    return detail::check(
        pact_group_step(g_, model_epoch, generation, send.data(), recv.data(), deadline_us));
  }
  /** Blocking until the step is final: OK when every chunk committed, else the first failure
   * (PACT_ERR_TIMED_OUT when timeout_ms passed first). */
  Result<void> wait(int timeout_ms) const { return detail::check(pact_group_wait(g_, timeout_ms)); }

 private:
  pact_group_t g_ = nullptr;
};

inline Result<Group> Engine::createGroup(uint64_t group_id, std::span<const pact_peer_t> peers,
                                         uint32_t my_rank) const {
  pact_group_t g = nullptr;
  if (pact_status_t s = pact_group_create(e_, group_id, peers.data(), peers.size(), my_rank, &g);
      s < 0)
    return Error::last(s);
  return Group(g);
}

}  // namespace pact::xfer
