#include "engine/control.h"

#include <cstring>

#include "common/codec.h"

namespace pact::engine {

namespace {

enum class Type : uint16_t {
  kAdvertise = 1, kDone = 2, kVerdict = 3, kEpochChange = 4, kCredit = 5, kOffer = 6, kHello = 7,
  kCancel = 9,  // 8 was the proof of the engine's own handshake (now the session's)
  kWired = 10,
};
constexpr uint16_t kLastType = 10;
constexpr uint32_t kPieceMagic = 0x50564b50;  // "PKVP" in memory order

void putKey(ByteWriter& w, const TransferKey& k) {
  w.u64(k.requestId);
  w.u64(k.transferId);
  w.u64(k.modelEpoch);
  w.u32(k.generation);
}

bool getKey(ByteReader& r, TransferKey* k) {
  return r.u64(&k->requestId, "request_id") && r.u64(&k->transferId, "transfer_id") &&
         r.u64(&k->modelEpoch, "model_epoch") && r.u32(&k->generation, "generation");
}

struct Encoder {
  ByteWriter& w;
  Type operator()(const Advertise& m) {
    putKey(w, m.key);
    w.u64(m.deadlineUs);
    w.u64(m.creditBytes);
    w.u64(m.regionBase);
    w.u64(m.regionLength);
    w.bytes(m.rkey);
    w.u32(static_cast<uint32_t>(m.blocks.size()));
    for (const Block& b : m.blocks) {
      w.u64(b.offset);
      w.u64(b.length);
    }
    return Type::kAdvertise;
  }
  Type operator()(const Done& m) {
    putKey(w, m.key);
    w.u32(m.attempt);
    w.u64(m.bytes);
    w.u8(static_cast<uint8_t>(m.checksumKind));
    w.u64(m.checksum);
    w.u64(m.nonce);
    return Type::kDone;
  }
  Type operator()(const Verdict& m) {
    putKey(w, m.key);
    w.u8(static_cast<uint8_t>(m.outcome));
    w.u16(static_cast<uint16_t>(m.reason));
    w.u32(m.attempt);
    w.u64(m.nonce);
    return Type::kVerdict;
  }
  Type operator()(const Offer& m) {
    putKey(w, m.key);
    w.u64(m.bytes);
    w.u64(m.deadlineUs);
    w.u8(m.flags);
    w.u8(static_cast<uint8_t>(m.checksumKind));
    w.u64(m.checksum);
    w.u64(m.nonce);
    return Type::kOffer;
  }
  Type operator()(const Hello& m) {
    w.bytes(std::vector<uint8_t>(m.name.begin(), m.name.end()));
    w.u64(m.token);
    w.u64(m.epoch);
    w.bytes(m.workerAddress);
    w.u8(static_cast<uint8_t>(m.contexts.size()));
    for (const ContextAddress& c : m.contexts) {
      w.bytes(std::vector<uint8_t>(c.service.begin(), c.service.end()));
      w.u8(static_cast<uint8_t>(c.rails.size()));
      for (const auto& a : c.rails) w.bytes(a);
    }
    wire::putProbes(w, m.probes);
    return Type::kHello;
  }
  Type operator()(const Cancel& m) {
    putKey(w, m.key);
    w.u8(m.answer ? 1 : 0);
    w.u64(m.nonce);
    w.u8(m.closing ? 1 : 0);
    return Type::kCancel;
  }
  Type operator()(const EpochChange& m) {
    w.u64(m.newEpoch);
    return Type::kEpochChange;
  }
  Type operator()(const CreditUpdate& m) {
    w.u64(m.budgetBytes);
    return Type::kCredit;
  }
  Type operator()(const Wired&) { return Type::kWired; }
};

Result<Control> decodeAdvertise(ByteReader& r, Advertise* spare) {
  Advertise m;
  if (spare != nullptr) {
    m.rkey = std::move(spare->rkey);
    m.blocks = std::move(spare->blocks);
    m.rkey.clear();
    m.blocks.clear();
  }
  uint32_t n = 0;
  if (!getKey(r, &m.key) || !r.u64(&m.deadlineUs, "deadline_us") ||
      !r.u64(&m.creditBytes, "credit_bytes") || !r.u64(&m.regionBase, "region_base") ||
      !r.u64(&m.regionLength, "region_length") || !r.bytes(&m.rkey, kMaxRkey, "rkey", 0) ||
      !r.u32(&n, "blocks"))
    return r.error();
  if (n == 0 || n > kMaxBlocks) {
    r.fail("blocks", "count " + std::to_string(n) + " outside 1.." + std::to_string(kMaxBlocks));
    return r.error();
  }
  if (m.regionBase + m.regionLength < m.regionBase) {
    r.fail("region_length", "region wraps around the address space");
    return r.error();
  }
  m.blocks.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    Block& b = m.blocks[i];
    const std::string field = "blocks[" + std::to_string(i) + "]";
    if (!r.u64(&b.offset, field.c_str()) || !r.u64(&b.length, field.c_str())) return r.error();
    if (b.offset + b.length < b.offset || b.offset + b.length > m.regionLength) {
      r.fail(field.c_str(), "offset " + std::to_string(b.offset) + " + length " +
                                std::to_string(b.length) + " exceeds the region (" +
                                std::to_string(m.regionLength) + " bytes)");
      return r.error();
    }
  }
  if (!r.done()) return r.error();
  return Control(std::move(m));
}

bool getChecksumKind(ByteReader& r, Verify* out) {
  uint8_t kind = 0;
  if (!r.u8(&kind, "checksum_kind")) return false;
  if (kind > 2) {
    r.fail("checksum_kind", "unknown kind " + std::to_string(kind));
    return false;
  }
  *out = static_cast<Verify>(kind);
  return true;
}

Result<Control> decodeDone(ByteReader& r) {
  Done m;
  if (!getKey(r, &m.key) || !r.u32(&m.attempt, "attempt") || !r.u64(&m.bytes, "bytes") ||
      !getChecksumKind(r, &m.checksumKind) || !r.u64(&m.checksum, "checksum") || !r.u64(&m.nonce, "nonce") ||
      !r.done())
    return r.error();
  return Control(m);
}

Result<Control> decodeVerdict(ByteReader& r) {
  Verdict m;
  uint8_t outcome = 0;
  uint16_t reason = 0;
  if (!getKey(r, &m.key) || !r.u8(&outcome, "outcome") || !r.u16(&reason, "reason") ||
      !r.u32(&m.attempt, "attempt") || !r.u64(&m.nonce, "nonce"))
    return r.error();
  if (outcome < 1 || outcome > 3) {
    r.fail("outcome", "unknown outcome " + std::to_string(outcome));
    return r.error();
  }
  if (reason > kMaxReason) {
    r.fail("reason", "unknown reason " + std::to_string(reason));
    return r.error();
  }
  m.outcome = static_cast<Outcome>(outcome);
  m.reason = static_cast<Reason>(reason);
  if (!r.done()) return r.error();
  return Control(m);
}

Result<Control> decodeOffer(ByteReader& r) {
  Offer m;
  if (!getKey(r, &m.key) || !r.u64(&m.bytes, "bytes") || !r.u64(&m.deadlineUs, "deadline_us") ||
      !r.u8(&m.flags, "flags") || !getChecksumKind(r, &m.checksumKind) ||
      !r.u64(&m.checksum, "checksum") || !r.u64(&m.nonce, "nonce"))
    return r.error();
  if ((m.flags & ~(kOfferEager | kOfferRepeat)) != 0) {
    r.fail("flags", "unknown flags " + std::to_string(m.flags));
    return r.error();
  }
  if (!r.done()) return r.error();
  return Control(m);
}

Result<Control> decodeHello(ByteReader& r) {
  Hello m;
  std::vector<uint8_t> name;
  if (!r.bytes(&name, kMaxName, "name") || !r.u64(&m.token, "token") ||
      !r.u64(&m.epoch, "epoch") || !r.bytes(&m.workerAddress, kMaxWorkerAddress, "worker_address"))
    return r.error();
  uint8_t contexts = 0;
  if (!r.u8(&contexts, "contexts")) return r.error();
  if (contexts > kMaxContexts) {
    r.fail("contexts", "expected at most " + std::to_string(kMaxContexts) + ", got " +
                           std::to_string(contexts));
    return r.error();
  }
  for (uint8_t i = 0; i < contexts; ++i) {
    ContextAddress c;
    std::vector<uint8_t> service;
    uint8_t rails = 0;
    if (!r.bytes(&service, kMaxName, "contexts.service") || !r.u8(&rails, "contexts.rails"))
      return r.error();
    if (rails == 0 || rails > kMaxRails) {
      r.fail("contexts.rails", "expected 1 to " + std::to_string(kMaxRails) + ", got " +
                                   std::to_string(rails));
      return r.error();
    }
    c.service.assign(service.begin(), service.end());
    c.rails.resize(rails);
    for (auto& a : c.rails)
      if (!r.bytes(&a, kMaxWorkerAddress, "contexts.address")) return r.error();
    m.contexts.push_back(std::move(c));
  }
  if (!wire::getProbes(r, &m.probes) || !r.done()) return r.error();
  m.name.assign(name.begin(), name.end());
  return Control(std::move(m));
}

}  // namespace

std::vector<uint8_t> encode(const Control& m) {
  std::vector<uint8_t> out;
  encodeInto(m, &out);
  return out;
}

void encodeInto(const Control& m, std::vector<uint8_t>* out) {
  ByteWriter w;  // written in place in out's buffer, which keeps its capacity
  w.out.swap(*out);
  beginFrame(w);
  const Type t = std::visit(Encoder{w}, m);
  endFrame(w, kControlMagic, kControlVersion, static_cast<uint16_t>(t));
  w.out.swap(*out);
}

Result<size_t> frameLength(std::span<const uint8_t> header) {
  ByteReader r(header.first(std::min(header.size(), kControlHeader)), "control");
  uint32_t magic = 0, length = 0;
  uint16_t version = 0, type = 0;
  if (!r.u32(&magic, "magic") || !r.u16(&version, "version") || !r.u16(&type, "type") ||
      !r.u32(&length, "length"))
    return r.error();
  if (magic != kControlMagic) return Error{Status::kInvalidArgument, "control.magic: not a pact control frame"};
  if (version != kControlVersion)
    return Error{Status::kRefused, "control.version: peer speaks " + std::to_string(version) +
                                       ", this side " + std::to_string(kControlVersion)};
  if (type < 1 || type > kLastType)
    return Error{Status::kInvalidArgument, "control.type: unknown type " + std::to_string(type)};
  if (length > kMaxControlBody)
    return Error{Status::kInvalidArgument, "control.length: " + std::to_string(length) +
                                               " exceeds " + std::to_string(kMaxControlBody)};
  return static_cast<size_t>(length);
}

Result<Control> decode(std::span<const uint8_t> frame, Advertise* spare) {
  auto len = frameLength(frame);
  if (!len.ok()) return len.error();
  if (frame.size() != kControlHeader + *len)
    return Error{Status::kInvalidArgument, "control.length: says " + std::to_string(*len) +
                                               " bytes, frame has " +
                                               std::to_string(frame.size() - kControlHeader)};
  const auto type = static_cast<Type>(frame[6] | (frame[7] << 8));
  auto body = frame.subspan(kControlHeader);
  switch (type) {
    case Type::kAdvertise: {
      ByteReader r(body, "advertise");
      return decodeAdvertise(r, spare);
    }
    case Type::kDone: {
      ByteReader r(body, "done");
      return decodeDone(r);
    }
    case Type::kVerdict: {
      ByteReader r(body, "verdict");
      return decodeVerdict(r);
    }
    case Type::kEpochChange: {
      ByteReader r(body, "epoch_change");
      EpochChange m;
      if (!r.u64(&m.newEpoch, "new_epoch") || !r.done()) return r.error();
      return Control(m);
    }
    case Type::kCredit: {
      ByteReader r(body, "credit");
      CreditUpdate m;
      if (!r.u64(&m.budgetBytes, "budget_bytes") || !r.done()) return r.error();
      return Control(m);
    }
    case Type::kOffer: {
      ByteReader r(body, "offer");
      return decodeOffer(r);
    }
    case Type::kHello: {
      ByteReader r(body, "hello");
      return decodeHello(r);
    }
    case Type::kWired: {
      ByteReader r(body, "wired");
      if (!r.done()) return r.error();
      return Control(Wired{});
    }
    case Type::kCancel: {
      ByteReader r(body, "cancel");
      Cancel m;
      uint8_t answer = 0, closing = 0;
      if (!getKey(r, &m.key) || !r.u8(&answer, "answer")) return r.error();
      if (answer > 1) {
        r.fail("answer", "expected 0 or 1, got " + std::to_string(answer));
        return r.error();
      }
      if (!r.u64(&m.nonce, "nonce") || !r.u8(&closing, "closing")) return r.error();
      if (closing > 1) {
        r.fail("closing", "expected 0 or 1, got " + std::to_string(closing));
        return r.error();
      }
      m.answer = answer == 1;
      m.closing = closing == 1;
      if (!r.done()) return r.error();
      return Control(m);
    }
  }
  return Error{Status::kInvalidArgument, "control.type: unknown"};
}

const char* reasonName(Reason r) {
  switch (r) {
    case Reason::kNone: return "none";
    case Reason::kEpochMismatch: return "epoch mismatch";
    case Reason::kChecksum: return "checksum mismatch";
    case Reason::kDeadline: return "deadline passed";
    case Reason::kRejected: return "rejected by the commit hook";
    case Reason::kDuplicate: return "duplicate";
    case Reason::kOutOfRange: return "out of range";
    case Reason::kPeerLost: return "peer lost";
    case Reason::kStale: return "stale generation";
    case Reason::kSizeMismatch: return "size mismatch";
    case Reason::kShutdown: return "engine shut down";
    case Reason::kIncomplete: return "pieces missing";
    case Reason::kCanceled: return "canceled by the application";
  }
  return "?";
}

void encodePiece(const PieceHeader& h, uint8_t out[kPieceHeaderSize]) {
  thread_local ByteWriter w;  // keeps its capacity: no allocation per piece
  w.out.clear();
  w.u32(kPieceMagic);
  w.u64(h.token);
  putKey(w, h.key);
  w.u32(h.attempt);
  w.u32(h.block);
  w.u64(h.offset);
  std::memcpy(out, w.out.data(), kPieceHeaderSize);
}

Result<PieceHeader> decodePiece(std::span<const uint8_t> in) {
  ByteReader r(in, "piece");
  PieceHeader h;
  uint32_t magic = 0;
  if (!r.u32(&magic, "magic")) return r.error();
  if (magic != kPieceMagic) {
    r.fail("magic", "not a pact data piece");
    return r.error();
  }
  if (!r.u64(&h.token, "token") || !getKey(r, &h.key) || !r.u32(&h.attempt, "attempt") ||
      !r.u32(&h.block, "block") || !r.u64(&h.offset, "offset") || !r.done())
    return r.error();
  return h;
}

}  // namespace pact::engine
