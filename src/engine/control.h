// Control messages of the transfer engine (ARCHITECTURE.md section 5), exchanged between a
// receiver and its senders. Versioned and bounds-checked like the connection handshake; every
// decode failure names the message and the field, and remote-supplied ranges are checked here,
// before anything can act on them. Pure functions: unit-tested and fuzzed directly.
//
// Frame = { u32 magic "PKVC", u16 version, u16 type, u32 body length } + body, little-endian.
// Data pieces travel as UCP active messages whose header is a fixed-size PieceHeader.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/checksum.h"
#include "common/codec.h"
#include "common/status.h"
#include "common/transfer_key.h"
#include "transport/wire.h"

namespace pact::engine {

inline constexpr uint32_t kControlMagic = 0x43564b50;  // "PKVC" in memory order
inline constexpr uint16_t kControlVersion = 7;  // 2: Hello lists the engine's contexts; 3: auth moved to the session; 4: eager offers; 5: Hello carries rail probe addresses; 6: a send's nonce in Offer, Done, Verdict and Cancel; 7: Wired
inline constexpr size_t kControlHeader = kFrameHeader;
inline constexpr size_t kMaxBlocks = 65536;
inline constexpr size_t kMaxRkey = 1024;
inline constexpr size_t kMaxName = 256;
inline constexpr size_t kMaxWorkerAddress = 4096;
inline constexpr size_t kMaxContexts = 16;  // per engine: one per distinct class service
inline constexpr size_t kMaxRails = 8;
inline constexpr size_t kMaxControlBody = 16 + 64 + kMaxRkey + kMaxBlocks * 16;


struct Block {
  uint64_t offset = 0;  // into the advertised region
  uint64_t length = 0;
};

// Receiver -> sender: credit granted and where the blocks go.
struct Advertise {
  TransferKey key;
  uint64_t deadlineUs = 0;    // time budget left, in us from receipt (clocks are not shared)
  uint64_t creditBytes = 0;   // bytes this transfer may have in flight
  uint64_t regionBase = 0;    // remote address of the destination region
  uint64_t regionLength = 0;
  // Packed remote key of the region, 0..kMaxRkey bytes. Empty: the receiver mediates every write
  // (pieces are active messages it range-checks and lands itself), so no remote key exists.
  std::vector<uint8_t> rkey;
  std::vector<Block> blocks;  // each inside [0, regionLength), 1..kMaxBlocks
};


// Every pact_send has a nonce, unique in its sender's process, in every Offer, Done and Cancel it
// sends; the receiver keeps the nonce of the send that committed a key and puts the nonce of
// the send a verdict is about in the Verdict. So a copy of a send's own frames (a wire
// duplicate, a repeat after a lost verdict) is told apart from a second send of the same key:
// the first is answered "committed", the second refused as a duplicate.
//
// Offer flags. kOfferEager: the sender offered the transfer eagerly (docs/engine.md, "Eager
// transfers"): its first offer carried every byte, so it says the offer again (kOfferRepeat)
// rather than Done until the receiver advertises. kOfferRepeat: a repeat of an eager offer,
// without the bytes.
inline constexpr uint8_t kOfferEager = 1;
inline constexpr uint8_t kOfferRepeat = 2;

// Sender -> receiver: this transfer is ready to go; the receiver advertises it once it expects
// the key and has credit for the bytes. An eager offer travels as one active message with all
// the bytes behind it (and their checksum here): a receiver that expects the key and has credit
// lands and commits them at once, with no Advertise and no Done; one that cannot falls back to
// advertising, and the bytes come again as pieces.
struct Offer {
  TransferKey key;
  uint64_t bytes = 0;
  uint64_t deadlineUs = 0;  // time budget left, in us from receipt; 0 = none
  uint8_t flags = 0;        // kOfferEager, kOfferRepeat
  Verify checksumKind = Verify::kNone;  // of the bytes behind an eager offer
  uint64_t checksum = 0;
  uint64_t nonce = 0;  // the send's
};

// Sender -> receiver: every byte of attempt `attempt` of the transfer has been sent.
struct Done {
  TransferKey key;
  uint32_t attempt = 0;
  uint64_t bytes = 0;
  Verify checksumKind = Verify::kNone;
  uint64_t checksum = 0;
  uint64_t nonce = 0;  // the send's
};

// kRetry: the attempt failed in a way a resend can fix (checksum); send attempt `attempt` again.
enum class Outcome : uint8_t { kCommitted = 1, kAborted = 2, kRetry = 3 };
enum class Reason : uint16_t {
  kNone = 0, kEpochMismatch = 1, kChecksum = 2, kDeadline = 3, kRejected = 4, kDuplicate = 5,
  kOutOfRange = 6, kPeerLost = 7, kStale = 8, kSizeMismatch = 9, kShutdown = 10, kIncomplete = 11,
  kCanceled = 12,  // the receiver's application released the transfer
};
inline constexpr uint16_t kMaxReason = 12;

// Receiver -> sender: what became of the transfer.
struct Verdict {
  TransferKey key;
  Outcome outcome = Outcome::kCommitted;
  Reason reason = Reason::kNone;
  uint32_t attempt = 0;  // kRetry: the attempt the receiver now accepts
  uint64_t nonce = 0;    // of the send it answers (kCommitted for a committed key: the committing send's)
};

// Receiver -> senders: the receiver moved to a new model epoch; older transfers are aborted.
struct EpochChange {
  uint64_t newEpoch = 0;
};

// Receiver -> sender: the sender's credit budget changed (e.g. free KV pages ran low).
struct CreditUpdate {
  uint64_t budgetBytes = 0;
};

// Either side, once at the handshake: every endpoint this side made to the peer finished its
// wireup (its flush ended). A peer is ready once its own side is wired and its Wired came, so
// neither process still has UCX wireup messages in flight when connect returns (peer_table.h).
struct Wired {};

// One UCX context of an engine: the service it serves (transport::DeviceCtx::serviceKey) and its
// workers' addresses, one per rail. A sender's class reaches the receiver's context of the same
// service.
struct ContextAddress {
  std::string service;                        // 1..kMaxName bytes
  std::vector<std::vector<uint8_t>> rails;    // 1..kMaxRails, each 1..kMaxWorkerAddress bytes
  bool operator==(const ContextAddress&) const = default;
};

// Either side, in its channel's open or answer (the session authenticated both already): who
// this is and where its UCX workers are.
struct Hello {
  std::string name;                    // 1..kMaxName bytes
  uint64_t token = 0;                  // the sender's id of this connection; the peer puts it in
                                       // every message so the sender knows where it came from
  uint64_t epoch = 0;                  // the sender's current model epoch
  std::vector<uint8_t> workerAddress;  // 1..kMaxWorkerAddress bytes: where control messages go
  std::vector<ContextAddress> contexts{};  // 0..kMaxContexts: where each class's pieces go
  // The probe addresses of the engine's rails (transport/rail_probe.h), 0..kMaxRails: none when
  // it has one rail or rail failover is off.
  std::vector<wire::ProbeAddress> probes{};
};

// Sender -> receiver: the sender's application released the transfer before its Done left (the
// receiver aborts it, PACT_ERR_CANCELED, and never commits it), or destroyed its engine
// (closing: the receiver's transfer ends PACT_ERR_PEER_LOST, as pact_engine_destroy promises).
// answer: the sender waits for a verdict (an eager sender: the receiver may have committed
// already); the receiver answers with the verdict of the key, committed or canceled.
struct Cancel {
  TransferKey key;
  bool answer = false;
  uint64_t nonce = 0;    // the send's
  bool closing = false;  // not a release: the sender's engine is being destroyed (PEER_LOST there)
};

using Control =
    std::variant<Advertise, Done, Verdict, EpochChange, CreditUpdate, Offer, Hello, Cancel, Wired>;

std::vector<uint8_t> encode(const Control& m);
// The same frame written into *out (replacing its contents, keeping its capacity).
void encodeInto(const Control& m, std::vector<uint8_t>* out);
// Decodes one whole frame (header + body). Errors name the field: "advertise.blocks[3]: offset
// 4096 + length 8192 exceeds the region (8192 bytes)". spare: an Advertise no longer needed; an
// Advertise decoded takes its vectors (a steady stream decodes without allocating).
Result<Control> decode(std::span<const uint8_t> frame, Advertise* spare = nullptr);
// Body length announced by a header (to frame a byte stream), or an error naming the field.
Result<size_t> frameLength(std::span<const uint8_t> header);

const char* reasonName(Reason r);

// Header of one data piece (a UCP active message; the payload is the piece's bytes): which
// transfer attempt, which of the receiver's advertised blocks and where in it.
struct PieceHeader {
  uint64_t token = 0;  // the receiver's id of the connection (Hello.token)
  TransferKey key;
  uint32_t attempt = 0;
  uint32_t block = 0;
  uint64_t offset = 0;
};
inline constexpr size_t kPieceHeaderSize = 8 + 28 + 4 + 4 + 8 + 4;  // + u32 magic
void encodePiece(const PieceHeader& h, uint8_t out[kPieceHeaderSize]);
Result<PieceHeader> decodePiece(std::span<const uint8_t> in);

}  // namespace pact::engine
