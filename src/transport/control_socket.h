// ControlSocket: a non-blocking TCP connection carrying pact frames: a plugin session (every
// comm between two processes, transport/session.h) or an engine peer's handshake and liveness (a
// peer that dies closes it; a peer that leaves on purpose first sends BYE).
// Also the listening socket helpers. Nothing here ever blocks.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/scoped_fd.h"
#include "common/status.h"
#include "transport/wire.h"

namespace pact::transport {

struct Frame {
  wire::Header header;
  std::vector<uint8_t> body;
};

class ControlSocket {
 public:
  ControlSocket() = default;
  explicit ControlSocket(ScopedFd fd) : fd_(std::move(fd)) {}
  // Starts a non-blocking connect to the listener described by the handle.
  static Result<ControlSocket> connectTo(const wire::ListenHandle& h);

  int fd() const { return fd_.get(); }
  // Queues bytes for the next flush.
  void queue(const std::vector<uint8_t>& bytes) { out_.insert(out_.end(), bytes.begin(), bytes.end()); }
  // Writes queued bytes; kOk when all are out, kInProgress when some remain, kRefused when nothing
  // listens (ECONNREFUSED), kRemoteError when the connection failed otherwise.
  Status flush();
  // Reads what is available; returns a frame once one is complete. Error on EOF (the message says
  // "closed"), on a socket error, or on a malformed header (the codec's message).
  Result<std::optional<Frame>> poll();

 private:
  ScopedFd fd_;
  std::vector<uint8_t> out_;
  std::vector<uint8_t> in_;
};

// Turns a silent peer (dead link, frozen host) into a socket error within about peerTimeout.
// userTimeout false: keepalive probes only (TCP_USER_TIMEOUT left off; setUserTimeout later).
void enableKeepalive(int fd, std::chrono::microseconds peerTimeout, bool userTimeout = true);
// TCP_USER_TIMEOUT for peerTimeout: unacknowledged data, or keepalive probes past that age since the
// peer was last heard, end the connection.
void setUserTimeout(int fd, std::chrono::microseconds peerTimeout);
// Undoes it for an outage of any length (Sessions::holdLiveness): no keepalive, and unacknowledged
// data is retransmitted for kHeldUserTimeout rather than the kernel's bound (tcp_retries2, about
// 15 minutes).
void disableKeepalive(int fd);
inline constexpr std::chrono::milliseconds kHeldUserTimeout{INT32_MAX};  // about 24.8 days
// After a hold: what is unacknowledged gets `grace` more from now to be acknowledged (the kernel's
// retransmissions back off to 2 minutes apart, so a repaired link may take that long to be heard)
// before the connection ends; setUserTimeout once the peer is heard.
void graceUserTimeout(int fd, std::chrono::milliseconds grace);
// Whether the peer acknowledged everything sent and was heard within `within` (TCP_INFO).
bool heardRecently(int fd, std::chrono::milliseconds within);

// What a listen address names, as an IP address to bind: an IP address as it is; an interface of
// this host (its first IPv4 address, else IPv6: "eth0", "ib0"); else a host name it resolves
// ("localhost", the host's own name; IPv4 first). An error names what it is not.
Result<std::string> resolveListenIp(const std::string& spec);
// Whether ip is the wildcard ("0.0.0.0", "::"): bound everywhere, but no address a peer can use.
bool isWildcard(const std::string& ip);

// A non-blocking listening socket bound to ip and port (0: chosen by the kernel).
struct Listener {
  ScopedFd fd;
  sockaddr_storage addr{};
};
Result<Listener> listenOn(const std::string& ip, uint16_t port = 0);
// "ip:port" / "[ip6]:port" of a bound socket address, or of a handle's.
std::string formatAddress(const sockaddr_storage& addr);
// A handle's address as a socket address (its length), and a socket address into a handle's
// family, addr and port (the rest of the handle is left as it is).
socklen_t toSockaddr(const wire::ListenHandle& h, sockaddr_storage* out);
void fillAddress(const sockaddr_storage& addr, wire::ListenHandle* h);
std::string formatAddress(const wire::ListenHandle& h);
// The host of "ip:port" / "[ip6]:port" ("10.0.0.2", "fe80::1"); text without a colon is a host.
std::string hostOf(const std::string& address);
// Parses "ip:port" / "[ip6]:port" into a handle connectTo() accepts (listen id and epoch 0).
Result<wire::ListenHandle> parseAddress(const std::string& text);
// Accepts one pending connection, or returns an invalid fd when none is waiting.
Result<ScopedFd> acceptOne(int listenFd);

}  // namespace pact::transport
