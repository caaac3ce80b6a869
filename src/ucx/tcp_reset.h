// Resetting UCX's TCP connections of one rail to one peer, when that rail's link is out.
//
// Over TCP a link that goes down or black-holes leaves every connection over it established, with
// the kernel retransmitting for many minutes: UCX sees no error, so a receive it has matched on
// such a connection (a rendezvous whose data stopped coming) can be neither cancelled nor
// completed, and bytes the kernel still queues could land later, when the link returns, in a
// buffer long since reused. RDMA transports fail their queue pairs instead; TCP needs this.
// (UCX 1.15+ has UCX_TCP_USER_TIMEOUT; UCX 1.13 has nothing that bounds a connection with unacked
// data.)
//
// UCX's tcp interface of a worker keeps its sockets, its listener among them, in an epoll set of
// its own, nested in the set of its async thread that also holds the interfaces' listeners.
// resetTcpConnections finds, through /proc/self/fdinfo, every epoll set of the process that holds
// a TCP listener on localIp (UCX's, on that rail; sets marked with markNotUcx are left alone) and
// shuts down each TCP connection in it, or in the sets nested in it, between localIp and peerIp: UCX then sees the connection closed, fails the
// endpoints over it, and completes what they held with an error; nothing more can arrive over it.
// Returns the number of connections shut down.
#pragma once

#include <string>
#include <vector>

namespace pact::ucx {

int resetTcpConnections(const std::string& localIp, const std::string& peerIp);

// Epoll sets of the process that are not UCX's and hold TCP listeners (pact's session control
// planes): resetTcpConnections leaves them alone. on: add, else remove.
void markNotUcx(int epollFd, bool on);

}  // namespace pact::ucx
