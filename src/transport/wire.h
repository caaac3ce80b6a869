// The connection wire format: the listen handle NCCL carries between ranks, and the frames of the
// session (one control connection per pair of processes) and of the channels (comms) it carries. Versioned and bounds-checked; every decode failure
// names the field. Pure functions (no I/O), so they are unit-tested and fuzzed directly.
//
// Frame = header { u32 magic "PACT", u16 wire version, u16 type, u32 body length } + body.
// All integers little-endian.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/codec.h"
#include "common/status.h"

namespace pact::wire {

inline constexpr uint32_t kMagic = 0x54434150;  // "PACT" in memory order
// 2: auth and proof; 3: abort; 4: sessions and channels; 5: the class contract (comm shapes
// carry verify, retries and timeout; the verdict frame)
inline constexpr uint16_t kVersion = 6;
inline constexpr size_t kHeaderSize = 12;
inline constexpr size_t kMaxBody = 4096;
inline constexpr size_t kMaxWorkerAddress = 2048;
inline constexpr size_t kHandleSize = 128;  // NCCL_NET_HANDLE_MAXSIZE
// Bytes of the handle that carry the address; the rest is scratch space owned by connect().
inline constexpr size_t kHandleAddressBytes = 56;

// What a listen comm publishes through NCCL's bootstrap: where the listening process's session
// listener is (one per device and process, shared by every listen comm), which process that is,
// and which of its listen comms the connector wants.
struct ListenHandle {
  uint16_t family = 0;  // AF_INET or AF_INET6
  uint16_t port = 0;
  uint8_t addr[16] = {};
  uint64_t listenId = 0;  // the listen comm: index (low 32 bits) and generation (high 32)
  uint64_t epoch = 0;     // the listener's epoch (lets connect refuse before any I/O)
  uint64_t process = 0;   // the listening process's session id (random per plugin instance)
};
void encodeHandle(const ListenHandle& h, uint8_t out[kHandleSize]);
Result<ListenHandle> decodeHandle(std::span<const uint8_t> in);

// One control connection (a session) joins two processes and carries every comm ("channel")
// between them. Session frames: kHello, kAccept, kProof, kRefuse, kBye (the process leaves).
// Channel frames name the receiving side's channel id: kOpen (connector -> listener: a comm to a
// listen id), kOpened / kOpenRefused (the answer), kClose (that side closed its comm: the
// goodbye), kAbort (that side failed the comm for a reason the peer cannot see: a message larger
// than the receive buffer, a piece lost past the retry budget, a refused message), kVerdict
// (receiver -> sender of a verified comm: a message checked out, or which pieces to send again).
// Both faces use sessions (the engine's Hello rides its channel's open and answer), so type 5,
// the engine's own frame until wire version 4, is unused.
enum class FrameType : uint16_t {
  kHello = 1, kAccept = 2, kRefuse = 3, kBye = 4, kProof = 6, kAbort = 7,
  kOpen = 8, kOpened = 9, kOpenRefused = 10, kClose = 11, kVerdict = 12,
};
inline constexpr uint16_t kRetiredEngineFrame = 5;  // wire v3's engine frame: never sent since v4

struct Header {
  uint16_t version = kVersion;
  FrameType type = FrameType::kHello;
  uint32_t length = 0;
};
// Checks magic, type range and body length; the version is returned for the caller to judge.
Result<Header> decodeHeader(std::span<const uint8_t> in);

struct Hello {          // session: connector -> listener
  uint64_t process = 0;   // the connector's session id
  uint64_t epoch = 0;
  uint64_t listenId = 0;  // the listen id whose connect opened this session (a refusal fails it)
  uint8_t auth = 0;       // 1: the connector has PACT_AUTH_KEY_FILE set
  std::array<uint8_t, 32> nonce{};  // the connector's challenge
};
struct Accept {         // session: listener -> connector
  uint64_t process = 0;   // the listener's session id
  uint64_t epoch = 0;
  std::array<uint8_t, 32> nonce{};  // the listener's challenge
  std::array<uint8_t, 32> mac{};    // with auth: HMAC(key, accept label || hello nonce || nonce)
};
struct Proof {           // session: connector -> listener, with auth: HMAC(key, proof label ||
  std::array<uint8_t, 32> mac{};  // accept nonce || hello nonce)
};

struct Open {           // channel: connector -> listener
  uint64_t listenId = 0;  // 0: the listening process's default listen id (an engine's address)
  uint64_t channel = 0;   // the connector's channel id (the answer names it)
  std::vector<uint8_t> payload;  // the face's: the plugin's CommShape, the engine's Hello
};
struct Opened {         // channel: listener -> connector
  uint64_t channel = 0;      // the connector's channel id
  uint64_t peerChannel = 0;  // the listener's: what the connector's later frames name
  std::vector<uint8_t> payload;  // the face's: the plugin's CommAccept, the engine's Hello
};
inline constexpr size_t kMaxPayload = kMaxBody - 64;

// The plugin's payloads. CommShape: the sender's channel, so the receiver cuts its buffers the
// same way. CommAccept: the receive comm's tag space and where its rails are.
// Both carry the class contract: the sender's class asks, the receiver answers with what the
// comm does (the stronger of both classes, plus seals when the receiver fences).
struct Contract {
  uint8_t verify = 0;        // Verify's value: 0 none, 1 crc32c, 2 xxh3
  uint8_t retries = 0;       // 0..100
  uint64_t timeoutUs = 0;    // 0: none
  uint8_t sealed = 0;        // CommAccept only: messages carry seals (transport/seal.h)
};
// Where a process answers the rail probes of one of its rails (transport/rail_probe.h): a UDP
// address. family 0: that rail is not probed (failover off on that side).
struct ProbeAddress {
  uint8_t family = 0;  // 0 none, 4 IPv4, 6 IPv6
  std::array<uint8_t, 16> ip{};  // IPv4: the first 4 bytes
  uint16_t port = 0;
  bool operator==(const ProbeAddress&) const = default;
};
// The probe addresses of a side's rails (0..kMaxRails) in a frame, as CommShape, CommAccept and
// the engine's Hello carry them; getProbes names the field that is wrong.
void putProbes(ByteWriter& w, const std::vector<ProbeAddress>& probes);
bool getProbes(ByteReader& r, std::vector<ProbeAddress>* probes);
struct CommShape {
  uint8_t unordered = 0;  // 0 ordered, 1 unordered
  uint8_t lanes = 1;      // 1..16
  uint8_t rails = 1;      // the sender's rails (ports of its virtual device), 1..8
  uint64_t chunk = 0;     // unordered: power of two in [4 KiB, 1 GiB]
  Contract contract;      // the sender's class (sealed unused)
  std::vector<ProbeAddress> probes;  // the sender's rails' probe addresses (0..8; none: not probed)
  uint64_t ackSink = 0;  // whom the receiver acknowledges messages to (transport::AckSink; 0: none)
  std::vector<ProbeAddress> ackTo;  // where, per rail (the sender's acknowledgement sockets)
};
inline constexpr uint8_t kMaxLanes = 16;
inline constexpr size_t kMaxRails = 8;
inline constexpr uint64_t kMinChunk = 4096;
inline constexpr uint64_t kMaxChunk = uint64_t{1} << 30;
struct CommAccept {
  uint32_t tagSpace = 0;  // the receive comm's tag space and generation (net/tags.h)
  std::vector<std::vector<uint8_t>> railAddresses;  // one worker address per rail, 1..8
  Contract contract;      // what the comm does, decided by the receiver
  std::vector<ProbeAddress> probes;  // the receiver's rails' probe addresses (0..8)
};
inline constexpr uint8_t kMaxRetries = 100;
inline constexpr uint64_t kMaxTimeoutUs = uint64_t{3600} * 1000 * 1000;  // an hour
// Receiver -> sender, for each message of a comm with verify: its checks matched (kVerified: the
// send may complete), or the pieces listed did not and are awaited again (kResend; kResendAll
// when the list would not fit). The message is named by the sender's NCCL tag and its count of
// messages with that tag (the full counter, not the tag's 9 bits).
enum class VerdictKind : uint8_t { kVerified = 0, kResend = 1, kResendAll = 2 };
struct Verdict {
  uint64_t channel = 0;  // the recipient's channel id
  uint32_t tag = 0;
  uint32_t seq = 0;
  VerdictKind kind = VerdictKind::kVerified;
  std::vector<uint32_t> pieces;  // kResend: 1..kMaxResendList piece indices
};
inline constexpr size_t kMaxResendList = 512;
// kAuth: authentication (PACT_AUTH_KEY_FILE) on one side only (values 1/0) or a proof that does
// not verify (expected 1, got 0). kListenId: no listen comm has that id (closed, or never);
// kCapacity: the listener cannot hold another comm (values: its limit, 0).
enum class Field : uint16_t {
  kMagic = 1, kVersion = 2, kListenId = 3, kEpoch = 4, kAuth = 5, kCapacity = 6,
};
const char* fieldName(Field f);
struct Refuse {         // session: either side -> the other: which field differs, both values
  Field field = Field::kEpoch;
  uint64_t expected = 0;  // the refusing side's value
  uint64_t got = 0;       // the value it received
};
// What a refusal says, as a sentence: "epoch differs (local 3, remote 4)", "listen id 7 is not
// listening (closed)". byPeer: the peer refused (its expected value is the remote one).
std::string describe(const Refuse& r, bool byPeer);
struct OpenRefused {    // channel: listener -> connector
  uint64_t channel = 0;   // the connector's channel id
  Refuse why;
};
struct Close {          // channel: either side -> the other (the recipient's channel id)
  uint64_t channel = 0;
};
struct Abort {          // channel: either side -> the other
  uint64_t channel = 0;   // the recipient's channel id
  std::string reason;     // printable, 1..kMaxAbortReason bytes
};
inline constexpr size_t kMaxAbortReason = 512;

std::vector<uint8_t> encode(const Hello& m);
std::vector<uint8_t> encode(const Accept& m);
std::vector<uint8_t> encode(const Refuse& m);
std::vector<uint8_t> encode(const Proof& m);
std::vector<uint8_t> encode(const Open& m);
std::vector<uint8_t> encode(const Opened& m);
std::vector<uint8_t> encode(const OpenRefused& m);
std::vector<uint8_t> encode(const Close& m);
std::vector<uint8_t> encode(const Abort& m);  // a longer reason is cut to kMaxAbortReason
std::vector<uint8_t> encode(const Verdict& m);
std::vector<uint8_t> encodeBye();

Result<Hello> decodeHello(std::span<const uint8_t> body);
Result<Accept> decodeAccept(std::span<const uint8_t> body);
Result<Refuse> decodeRefuse(std::span<const uint8_t> body);
Result<Proof> decodeProof(std::span<const uint8_t> body);
Result<Open> decodeOpen(std::span<const uint8_t> body);
Result<Opened> decodeOpened(std::span<const uint8_t> body);
// Payloads (no frame header).
std::vector<uint8_t> encode(const CommShape& m);
std::vector<uint8_t> encode(const CommAccept& m);
Result<CommShape> decodeCommShape(std::span<const uint8_t> payload);
Result<CommAccept> decodeCommAccept(std::span<const uint8_t> payload);
Result<OpenRefused> decodeOpenRefused(std::span<const uint8_t> body);
Result<Close> decodeClose(std::span<const uint8_t> body);
Result<Abort> decodeAbort(std::span<const uint8_t> body);
Result<Verdict> decodeVerdict(std::span<const uint8_t> body);

}  // namespace pact::wire
