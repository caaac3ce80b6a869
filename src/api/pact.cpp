// The C API (include/pact/pact.h) over pact::engine: argument checks, type mapping, and a
// catch-all so no exception ever crosses the C boundary.
#include "pact/pact.h"

#include <cstring>
#include <new>
#include <string>

#include "engine/engine.h"
#include "engine/group.h"
#include "telemetry/exporter.h"

using pact::engine::BlockRef;
using pact::Status;
using pact::engine::Engine;
using pact::engine::Registration;
using pact::TransferKey;

struct pact_engine {
  std::unique_ptr<Engine> engine;
};
struct pact_group {
  Engine* engine;
  std::unique_ptr<pact::engine::Group> group;
};

static_assert(sizeof(pact_block_t) == sizeof(BlockRef));
static_assert(offsetof(pact_block_t, offset) == offsetof(BlockRef, offset));
static_assert(offsetof(pact_block_t, length) == offsetof(BlockRef, length));
// pact_stats_t holds the engine's counters in catalog order (telemetry/counters.h).
static_assert(sizeof(pact_stats_t) == pact::telemetry::kEngineCounters * sizeof(uint64_t));
static_assert(offsetof(pact_stats_t, committed) == pact::telemetry::kCommitted * sizeof(uint64_t));
static_assert(offsetof(pact_stats_t, credit_stall_ns) == pact::telemetry::kCreditStallNs * sizeof(uint64_t));
static_assert(offsetof(pact_stats_t, faults_injected) == pact::telemetry::kFaultsInjected * sizeof(uint64_t));
static_assert(offsetof(pact_stats_t, rail_down_us) == pact::telemetry::kEngineRailDownUs * sizeof(uint64_t));
static_assert(PACT_STATE_ABORTED == static_cast<int>(pact::engine::State::kAborted));

namespace {

// The one mapping from the internal error model to the frozen C codes.
pact_status_t st(Status s) {
  switch (s) {
    case Status::kOk: return PACT_OK;
    case Status::kInProgress: return PACT_IN_PROGRESS;
    case Status::kInvalidArgument: return PACT_ERR_INVALID_ARG;
    case Status::kUnsupported: return PACT_ERR_UNSUPPORTED;
    case Status::kNoMemory:
    case Status::kNoResource: return PACT_ERR_NO_MEMORY;
    case Status::kRemoteError: return PACT_ERR_PEER_LOST;
    case Status::kSystemError: return PACT_ERR_SYSTEM;
    case Status::kInternal: return PACT_ERR_INTERNAL;
    case Status::kTimeout: return PACT_ERR_TIMED_OUT;
    case Status::kRefused: return PACT_ERR_REFUSED;
    case Status::kTruncated:
    case Status::kOutOfRange: return PACT_ERR_OUT_OF_RANGE;
    case Status::kCanceled: return PACT_ERR_CANCELED;
    case Status::kNotFound: return PACT_ERR_NOT_FOUND;
    case Status::kEpochMismatch: return PACT_ERR_EPOCH_MISMATCH;
    case Status::kChecksum: return PACT_ERR_CHECKSUM;
    case Status::kRejected: return PACT_ERR_REJECTED;
    case Status::kDeadline: return PACT_ERR_DEADLINE;
    case Status::kDuplicate: return PACT_ERR_DUPLICATE;
    case Status::kStale: return PACT_ERR_STALE;
    case Status::kBusy: return PACT_ERR_BUSY;
    case Status::kIncomplete: return PACT_ERR_INCOMPLETE;
    case Status::kPeerStale: return PACT_ERR_PEER_STALE;
  }
  return PACT_ERR_INTERNAL;
}

// The message of this thread's last failing call (pact_last_error): the one thread-local error of
// pact. Inside the library an error travels in its Result.
thread_local std::string tlsError;

pact_status_t fail(Status s, std::string message) {
  tlsError = std::move(message);
  return st(s);
}
pact_status_t fail(const pact::Error& e) { return fail(e.status, e.message); }
pact_status_t st(const pact::Result<void>& r) { return r ? PACT_OK : fail(r.error()); }
// r's value into *out, or r's error kept for pact_last_error().
template <typename T, typename U>
pact_status_t take(pact::Result<T>&& r, U* out) {
  if (!r) return fail(r.error());
  *out = std::move(r).value();
  return PACT_OK;
}

pact_status_t bad(const char* what) { return fail(Status::kInvalidArgument, what); }

// Runs f, turning any exception (a bug or std::bad_alloc) into a status.
template <typename F>
pact_status_t guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(Status::kNoMemory, "out of memory");
  } catch (const std::exception& e) {
    return fail(Status::kInternal, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(Status::kInternal, "internal error");
  }
}

TransferKey toKey(const pact_key_t& k) {
  return TransferKey{k.request_id, k.transfer_id, k.model_epoch, k.generation};
}

pact_key_t fromKey(const TransferKey& k) {
  return pact_key_t{k.requestId, k.transferId, k.modelEpoch, k.generation};
}

std::span<const BlockRef> toBlocks(const pact_block_t* blocks, size_t count) {
  return {reinterpret_cast<const BlockRef*>(blocks), count};
}

void toInfo(const pact::engine::XferInfo& in, pact_xfer_info_t* out) {
  out->state = static_cast<pact_state_t>(in.state);
  out->result = st(in.result);
  out->final = in.final ? 1 : 0;
  out->retries = in.retries;
  out->key = fromKey(in.key);
  out->peer = in.peer;
  out->bytes = in.bytes;
}

}  // namespace

// The library is built with hidden visibility; the API's definitions are the exports.
#pragma GCC visibility push(default)
extern "C" {

const char* pact_status_string(pact_status_t status) {
  switch (status) {
    case PACT_OK: return "PACT_OK";
    case PACT_IN_PROGRESS: return "PACT_IN_PROGRESS";
    case PACT_ERR_INVALID_ARG: return "PACT_ERR_INVALID_ARG";
    case PACT_ERR_NO_MEMORY: return "PACT_ERR_NO_MEMORY";
    case PACT_ERR_NOT_FOUND: return "PACT_ERR_NOT_FOUND";
    case PACT_ERR_TIMED_OUT: return "PACT_ERR_TIMED_OUT";
    case PACT_ERR_EPOCH_MISMATCH: return "PACT_ERR_EPOCH_MISMATCH";
    case PACT_ERR_PEER_LOST: return "PACT_ERR_PEER_LOST";
    case PACT_ERR_REFUSED: return "PACT_ERR_REFUSED";
    case PACT_ERR_CHECKSUM: return "PACT_ERR_CHECKSUM";
    case PACT_ERR_REJECTED: return "PACT_ERR_REJECTED";
    case PACT_ERR_DEADLINE: return "PACT_ERR_DEADLINE";
    case PACT_ERR_DUPLICATE: return "PACT_ERR_DUPLICATE";
    case PACT_ERR_OUT_OF_RANGE: return "PACT_ERR_OUT_OF_RANGE";
    case PACT_ERR_STALE: return "PACT_ERR_STALE";
    case PACT_ERR_BUSY: return "PACT_ERR_BUSY";
    case PACT_ERR_SYSTEM: return "PACT_ERR_SYSTEM";
    case PACT_ERR_INTERNAL: return "PACT_ERR_INTERNAL";
    case PACT_ERR_INCOMPLETE: return "PACT_ERR_INCOMPLETE";
    case PACT_ERR_CANCELED: return "PACT_ERR_CANCELED";
    case PACT_ERR_UNSUPPORTED: return "PACT_ERR_UNSUPPORTED";
    case PACT_ERR_PEER_STALE: return "PACT_ERR_PEER_STALE";
  }
  return "PACT_ERR_UNKNOWN";
}

const char* pact_last_error(void) { return tlsError.c_str(); }

void pact_engine_config_init(pact_engine_config_t* config) {
  if (config == nullptr) return;
  std::memset(config, 0, sizeof *config);
  config->struct_size = sizeof *config;
}

pact_status_t pact_engine_create(const pact_engine_config_t* config, pact_engine_t* engine) {
  return guarded([&] {
    if (config == nullptr || engine == nullptr) return bad("engine_create: NULL argument");
    if (config->struct_size != sizeof *config)
      return bad("engine_create: config.struct_size does not match this library "
                 "(call pact_engine_config_init)");
    pact::engine::EngineConfig c;
    c.name = config->name != nullptr ? config->name : "";
    c.listenIp = config->listen_ip != nullptr ? config->listen_ip : "";
    c.listenPort = config->listen_port;
    c.modelEpoch = config->model_epoch;
    c.creditBudget = config->credit_budget;
    c.progressThread = config->progress_thread != 0;
    // The PACT_* configuration is read once per process, here at the C API's edge.
    static const pact::Result<pact::Params> params = pact::Params::fromProcessEnv();
    if (!params.ok()) return fail(Status::kInvalidArgument, params.error().message);
    pact::telemetry::startExporter({params->metrics_port, params->metrics_file, params->metrics_interval, params->metrics_per_comm != 0});
    auto handle = std::make_unique<pact_engine>();
    if (pact_status_t s = take(Engine::create(c, *params), &handle->engine); s != PACT_OK) return s;
    *engine = handle.release();
    return PACT_OK;
  });
}

void pact_engine_destroy(pact_engine_t engine) {
  try {
    if (engine != nullptr) pact::telemetry::flushMetricsFile();  // its counters' last values
    delete engine;
  } catch (...) {
  }
}

pact_status_t pact_engine_address(pact_engine_t engine, char* buffer, size_t length) {
  return guarded([&] {
    if (engine == nullptr || buffer == nullptr) return bad("engine_address: NULL argument");
    std::string a;
    if (pact_status_t s = take(engine->engine->address(), &a); s != PACT_OK) return s;
    if (a.size() + 1 > length) return bad("engine_address: buffer too small");
    std::memcpy(buffer, a.c_str(), a.size() + 1);
    return PACT_OK;
  });
}

pact_status_t pact_progress(pact_engine_t engine, int timeout_ms) {
  return guarded([&] {
    if (engine == nullptr) return bad("progress: NULL engine");
    engine->engine->progress(timeout_ms);
    return PACT_OK;
  });
}

pact_status_t pact_connect(pact_engine_t engine, const char* address, int timeout_ms,
                           pact_peer_t* peer) {
  return guarded([&] {
    if (engine == nullptr || address == nullptr || peer == nullptr) return bad("connect: NULL argument");
    return take(engine->engine->connect(address, timeout_ms), peer);
  });
}

pact_status_t pact_peer_wait(pact_engine_t engine, const char* name, int timeout_ms,
                             pact_peer_t* peer) {
  return guarded([&] {
    if (engine == nullptr || name == nullptr || peer == nullptr) return bad("peer_wait: NULL argument");
    return take(engine->engine->waitPeer(name, timeout_ms), peer);
  });
}

pact_status_t pact_peer_credit(pact_engine_t engine, pact_peer_t peer, uint64_t* budget,
                               uint64_t* in_use) {
  return guarded([&] {
    if (engine == nullptr || budget == nullptr || in_use == nullptr)
      return bad("peer_credit: NULL argument");
    pact::engine::CreditView v;
    if (pact_status_t s = take(engine->engine->peerCredit(peer), &v); s != PACT_OK) return s;
    *budget = v.budget;
    *in_use = v.inUse;
    return PACT_OK;
  });
}

pact_status_t pact_mem_register(pact_engine_t engine, void* addr, size_t length, pact_mr_t* mr) {
  pact_mem_desc_t desc;
  pact_mem_desc_init(&desc);
  desc.addr = addr;
  desc.length = length;
  return pact_mem_register_ex(engine, &desc, mr);
}

void pact_mem_desc_init(pact_mem_desc_t* desc) {
  if (desc == nullptr) return;
  std::memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  desc->type = PACT_MEM_HOST;
  desc->device = -1;
  desc->dmabuf_fd = -1;
}

pact_status_t pact_mem_register_ex(pact_engine_t engine, const pact_mem_desc_t* desc, pact_mr_t* mr) {
  return guarded([&] {
    if (engine == nullptr || desc == nullptr || mr == nullptr) return bad("mem_register: NULL argument");
    if (desc->struct_size != sizeof *desc)
      return bad("mem_register_ex: desc.struct_size does not match this library (call pact_mem_desc_init)");
    if (desc->type != PACT_MEM_HOST && desc->type != PACT_MEM_CUDA)
      return bad(("mem_register_ex: unknown memory type " + std::to_string(static_cast<int>(desc->type))).c_str());
    pact::engine::MemorySpec spec;
    spec.addr = desc->addr;
    spec.length = desc->length;
    spec.type = desc->type == PACT_MEM_CUDA ? pact::ucx::MemoryType::kCuda : pact::ucx::MemoryType::kHost;
    spec.device = desc->device;
    spec.dmabufFd = desc->dmabuf_fd;
    spec.dmabufOffset = desc->dmabuf_offset;
    Registration* r = nullptr;
    if (pact_status_t s = take(engine->engine->registerMemory(spec), &r); s != PACT_OK) return s;
    *mr = reinterpret_cast<pact_mr_t>(r);
    return PACT_OK;
  });
}

pact_status_t pact_mem_deregister(pact_engine_t engine, pact_mr_t mr) {
  return guarded([&] {
    if (engine == nullptr) return bad("mem_deregister: NULL engine");
    return st(engine->engine->deregister(reinterpret_cast<Registration*>(mr)));
  });
}

pact_status_t pact_set_epoch(pact_engine_t engine, uint64_t model_epoch) {
  return guarded([&] {
    if (engine == nullptr) return bad("set_epoch: NULL engine");
    return st(engine->engine->setEpoch(model_epoch));
  });
}

pact_status_t pact_peer_disconnect(pact_engine_t engine, pact_peer_t peer, const char* reason) {
  return guarded([&] {
    if (engine == nullptr) return bad("peer_disconnect: NULL engine");
    return st(engine->engine->disconnectPeer(peer, reason == nullptr ? "" : reason));
  });
}

pact_status_t pact_set_commit_hook(pact_engine_t engine, pact_commit_fn hook, void* user) {
  return guarded([&] {
    if (engine == nullptr) return bad("set_commit_hook: NULL engine");
    if (hook == nullptr) {
      engine->engine->setCommitHook(nullptr);
      return PACT_OK;
    }
    engine->engine->setCommitHook(
        [hook, user](uint64_t xfer, const TransferKey& key, uint64_t from,
                     std::span<const BlockRef> blocks) {
          const pact_key_t k = fromKey(key);
          return hook(user, xfer, &k, from, reinterpret_cast<const pact_block_t*>(blocks.data()),
                      blocks.size()) == 0;
        });
    return PACT_OK;
  });
}

pact_status_t pact_set_credit(pact_engine_t engine, pact_peer_t peer, uint64_t budget) {
  return guarded([&] {
    if (engine == nullptr) return bad("set_credit: NULL engine");
    return st(engine->engine->setCredit(peer, budget));
  });
}

pact_status_t pact_expect(pact_engine_t engine, const pact_key_t* key, const pact_block_t* blocks,
                          size_t count, uint64_t deadline_us, const char* traffic_class,
                          pact_xfer_t* xfer) {
  return guarded([&] {
    if (engine == nullptr || key == nullptr || blocks == nullptr || xfer == nullptr)
      return bad("expect: NULL argument");
    return take(engine->engine->expect(toKey(*key), toBlocks(blocks, count), deadline_us, traffic_class),
                xfer);
  });
}

pact_status_t pact_send(pact_engine_t engine, pact_peer_t peer, const pact_key_t* key,
                        const pact_block_t* blocks, size_t count, uint64_t deadline_us,
                        const char* traffic_class, pact_xfer_t* xfer) {
  return guarded([&] {
    if (engine == nullptr || key == nullptr || blocks == nullptr || xfer == nullptr)
      return bad("send: NULL argument");
    return take(engine->engine->send(peer, toKey(*key), toBlocks(blocks, count), deadline_us,
                                     traffic_class),
                xfer);
  });
}

pact_status_t pact_xfer_query(pact_engine_t engine, pact_xfer_t xfer, pact_xfer_info_t* info) {
  return guarded([&] {
    if (engine == nullptr || info == nullptr) return bad("xfer_query: NULL argument");
    pact::engine::XferInfo i;
    if (pact_status_t s = take(engine->engine->query(xfer), &i); s != PACT_OK) return s;
    toInfo(i, info);
    return PACT_OK;
  });
}

pact_status_t pact_xfer_wait(pact_engine_t engine, pact_xfer_t xfer, int timeout_ms,
                             pact_xfer_info_t* info) {
  return guarded([&] {
    if (engine == nullptr) return bad("xfer_wait: NULL engine");
    pact::engine::XferInfo i;
    auto r = engine->engine->wait(xfer, timeout_ms, &i);
    if (info != nullptr && r.status() != Status::kNotFound) toInfo(i, info);
    return st(r);
  });
}

pact_status_t pact_xfer_release(pact_engine_t engine, pact_xfer_t xfer) {
  return guarded([&] {
    if (engine == nullptr) return bad("xfer_release: NULL engine");
    auto gone = engine->engine->release(xfer);
    if (!gone) return fail(gone.error());
    return *gone ? PACT_OK : PACT_IN_PROGRESS;
  });
}

pact_status_t pact_group_create(pact_engine_t engine, uint64_t group_id, const pact_peer_t* peers,
                                size_t ranks, uint32_t my_rank, pact_group_t* group) {
  return guarded([&] {
    if (engine == nullptr || peers == nullptr || group == nullptr) return bad("group_create: NULL argument");
    if (ranks == 0 || my_rank >= ranks) return bad("group_create: my_rank outside 0..ranks-1");
    if (ranks > (1ull << 31)) return bad("group_create: too many ranks");
    for (size_t r = 0; r < ranks; ++r) {
      if (auto ready = engine->engine->checkPeer(peers[r]); !ready)
        return fail(ready.status(), "group_create: peers[" + std::to_string(r) + "]: " + ready.error().message);
    }
    auto g = std::make_unique<pact_group>();
    g->engine = engine->engine.get();
    g->group = std::make_unique<pact::engine::Group>(
        *engine->engine, group_id, std::vector<uint64_t>(peers, peers + ranks), my_rank);
    *group = g.release();
    return PACT_OK;
  });
}

pact_status_t pact_group_step(pact_group_t group, uint64_t model_epoch, uint32_t generation,
                              const pact_block_t* send, const pact_block_t* recv,
                              uint64_t deadline_us) {
  return guarded([&] {
    if (group == nullptr || send == nullptr || recv == nullptr) return bad("group_step: NULL argument");
    const size_t n = group->group->ranks();
    return st(group->group->step(model_epoch, generation, toBlocks(send, n), toBlocks(recv, n),
                                 deadline_us));
  });
}

pact_status_t pact_group_wait(pact_group_t group, int timeout_ms) {
  return guarded([&] {
    if (group == nullptr) return bad("group_wait: NULL group");
    return st(group->group->wait(timeout_ms));
  });
}

void pact_group_destroy(pact_group_t group) {
  try {
    delete group;
  } catch (...) {
  }
}

pact_status_t pact_stats(pact_engine_t engine, pact_stats_t* stats) {
  return guarded([&] {
    if (engine == nullptr || stats == nullptr) return bad("stats: NULL argument");
    // pact_stats_t is the engine catalog, field for counter, in order (checked above).
    const std::vector<uint64_t> v = engine->engine->stats();
    std::memcpy(stats, v.data(), sizeof *stats);
    return PACT_OK;
  });
}

size_t pact_trace_read(pact_engine_t engine, pact_event_t* events, size_t max, uint64_t* cursor) {
  if (engine == nullptr || events == nullptr || cursor == nullptr) return 0;
  try {
    std::vector<pact::telemetry::TraceEvent> buf(max);
    const size_t n = engine->engine->traceRead(cursor, buf.data(), max);
    for (size_t i = 0; i < n; ++i) {
      const auto& e = buf[i];
      events[i] = pact_event_t{e.timeNs, fromKey(e.key),
                               e.peer, e.role, e.state, e.event};
    }
    return n;
  } catch (...) {
    return 0;
  }
}

}  // extern "C"
#pragma GCC visibility pop
