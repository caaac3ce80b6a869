// The control connection's liveness settings (transport/control_socket.h) on a real loopback TCP
// connection, read back from the kernel: the peer timeout's keepalive and user timeout, the hold
// a rail-0 outage puts on them (the connection outlives an outage of any length rather than the
// kernel's ~15-minute retransmission bound), and the grace after the hold.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "transport/control_socket.h"

namespace pact::transport {
namespace {

struct Pair {
  Listener listener;
  ScopedFd client;
  ScopedFd server;
};

Pair connected() {
  Pair p;
  auto l = listenOn("127.0.0.1");
  EXPECT_TRUE(l.ok());
  if (!l.ok()) return p;
  p.listener = std::move(*l);
  p.client = ScopedFd(::socket(AF_INET, SOCK_STREAM, 0));
  EXPECT_EQ(::connect(p.client.get(), reinterpret_cast<const sockaddr*>(&p.listener.addr), sizeof(sockaddr_in)), 0);
  for (int i = 0; i < 1000 && !p.server.valid(); ++i) {  // the listener is non-blocking
    auto s = acceptOne(p.listener.fd.get());
    if (s.ok() && s->valid()) p.server = std::move(*s);
  }
  EXPECT_TRUE(p.server.valid());
  return p;
}

unsigned userTimeoutMs(int fd) {
  unsigned v = 0;
  socklen_t len = sizeof v;
  EXPECT_EQ(::getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, &len), 0);
  return v;
}

int keepalive(int fd) {
  int v = -1;
  socklen_t len = sizeof v;
  EXPECT_EQ(::getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0);
  return v;
}

TEST(Keepalive, HoldOutlivesTheKernelsBoundAndGraceFollowsIt) {
  Pair p = connected();
  ASSERT_TRUE(p.server.valid());
  const int fd = p.server.get();
  enableKeepalive(fd, std::chrono::seconds(2));
  EXPECT_EQ(keepalive(fd), 1);
  EXPECT_EQ(userTimeoutMs(fd), 3000u);  // at least 3 s (keepalive idle, then three probes)
  EXPECT_TRUE(heardRecently(fd, std::chrono::milliseconds(60000)));

  disableKeepalive(fd);  // rail 0 is out: the rails judge the peer
  EXPECT_EQ(keepalive(fd), 0);
  EXPECT_EQ(userTimeoutMs(fd), static_cast<unsigned>(kHeldUserTimeout.count()));
  EXPECT_GT(kHeldUserTimeout, std::chrono::hours(24 * 24));

  // Released: probes again, the unacknowledged data has the grace from the last acknowledgement.
  enableKeepalive(fd, std::chrono::seconds(2), false);
  graceUserTimeout(fd, std::chrono::milliseconds(250000));
  EXPECT_EQ(keepalive(fd), 1);
  EXPECT_GE(userTimeoutMs(fd), 250000u);
  EXPECT_LT(userTimeoutMs(fd), 250000u + 60000u);
  setUserTimeout(fd, std::chrono::seconds(2));  // heard: the peer timeout again
  EXPECT_EQ(userTimeoutMs(fd), 3000u);
}

}  // namespace
}  // namespace pact::transport
