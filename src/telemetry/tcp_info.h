// The TCP connections of the process (pact's control sockets and UCX's tcp transport alike: both
// are this process's descriptors), read with getsockopt(TCP_INFO) at each exposition, for the
// devices pact uses (a connection belongs to the interface that holds its local address):
//
//   pact_tcp_retransmits_total{device}         segments retransmitted on the device's connections,
//                                              closed ones included (what they had when last seen);
//                                              kept for a device no longer named (a counter does not
//                                              vanish: the last metrics file comes after the close)
//   pact_tcp_connections{device}               connections open now (devices named only)
//   pact_tcp_conn_retransmits{device,local,remote}   per connection: tcpi_total_retrans
//   pact_tcp_conn_rtt_us{...}, pact_tcp_conn_rttvar_us{...}, pact_tcp_conn_cwnd_segments{...},
//   pact_tcp_conn_unacked_segments{...}
//
// Loss on a link shows as retransmits on its device (the netns suite injects it). A connection
// that opens and closes between two expositions is never seen. Thread-safe.
#pragma once

#include <string>
#include <vector>

namespace pact::telemetry {

// devices: whose connections are read now.
std::string tcpText(const std::vector<std::string>& devices);

}  // namespace pact::telemetry
