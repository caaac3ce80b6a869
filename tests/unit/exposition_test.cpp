// The Prometheus text exposition of the counter registry (what PACT_METRICS_PORT serves and
// PACT_METRICS_FILE holds), read back by a strict parser of the format, and the exporter's
// endpoint on a real socket. The address parser of PACT_METRICS_PORT.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/parse.h"
#include "telemetry/counters.h"
#include "telemetry/exporter.h"
#include "telemetry/exposition.h"
#include "telemetry/tcp_info.h"

namespace pact::telemetry {
namespace {

// A strict reader of the text format (version 0.0.4): every line is a HELP, a TYPE or a sample;
// names and label names are valid; a family's HELP and TYPE come once, before its samples, which
// follow each other; label values are well escaped; values are numbers; no series twice. Returns
// the samples by "name{labels}", or fails the test naming the line.
std::map<std::string, double> parseStrict(const std::string& text) {
  static const std::regex name("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex help("# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (([^\\\\\n]|\\\\\\\\|\\\\n)*)");
  static const std::regex type("# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)");
  static const std::regex sample(
      "([a-zA-Z_:][a-zA-Z0-9_:]*)(\\{([a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\\n]|\\\\\\\\|\\\\\"|\\\\n)*\""
      "(,[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\\n]|\\\\\\\\|\\\\\"|\\\\n)*\")*)?\\})? (-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?)");
  std::map<std::string, double> out;
  std::set<std::string> helped, typed, closed;
  std::string current;
  std::istringstream in(text);
  int n = 0;
  EXPECT_TRUE(text.empty() || text.back() == '\n') << "the text ends with a newline";
  for (std::string line; std::getline(in, line);) {
    ++n;
    std::smatch m;
    std::string family;
    if (std::regex_match(line, m, help)) {
      family = m[1];
      EXPECT_TRUE(helped.insert(family).second) << "line " << n << ": a second HELP for " << family;
    } else if (std::regex_match(line, m, type)) {
      family = m[1];
      EXPECT_TRUE(typed.insert(family).second) << "line " << n << ": a second TYPE for " << family;
      EXPECT_EQ(m[2] == "counter", family.size() > 6 && family.ends_with("_total"))
          << "line " << n << ": counters, and only they, end in _total";
    } else if (std::regex_match(line, m, sample)) {
      family = m[1];
      EXPECT_TRUE(typed.count(family)) << "line " << n << ": a sample before its family's TYPE";
      EXPECT_TRUE(out.emplace(family + m[2].str(), std::stod(m[7])).second) << "line " << n << ": a series twice";
    } else {
      ADD_FAILURE() << "line " << n << " is not HELP, TYPE or a sample: " << line;
      continue;
    }
    if (family != current) {
      EXPECT_FALSE(closed.count(family)) << "line " << n << ": family " << family << " is split";
      if (!current.empty()) closed.insert(current);
      current = family;
    }
  }
  return out;
}

// The labels of a plugin send comm to host H on device lo, class C.
Labels commTo(const std::string& host, const std::string& cls = "0") {
  return {{"direction", "send"}, {"device", "lo"}, {"class", cls}, {"peer", host}};
}

TEST(Exposition, EverySeriesAndCounterIsThereAndParses) {
  CounterSet a(kEngineCatalog, "engine prefill-0", {{"engine", "prefill-0"}});
  CounterSet b(kEngineCatalog, "engine prefill-1", {{"engine", "prefill-1"}});
  CounterSet c(kCommCatalog, "send comm to 10.0.0.2:4242", commTo("10.0.0.2"));
  a.add(kCommitted, 7);
  a.set(kOpenTransfers, 3);
  b.add(kBytesSent, 1u << 20);
  c.add(kMessages, 11);
  const auto samples = parseStrict(prometheusText(Registry::process()));
  const std::string la = "{engine=\"prefill-0\"}", lb = "{engine=\"prefill-1\"}";
  const std::string lc = "{direction=\"send\",device=\"lo\",class=\"0\",peer=\"10.0.0.2\"}";
  EXPECT_EQ(samples.at("pact_engine_committed_total" + la), 7);
  EXPECT_EQ(samples.at("pact_engine_open_transfers" + la), 3) << "a gauge has no _total";
  EXPECT_EQ(samples.at("pact_engine_bytes_sent_total" + lb), 1u << 20);
  EXPECT_EQ(samples.at("pact_comm_messages_total" + lc), 11);
  for (const auto& [series, v] : samples) {
    EXPECT_EQ(series.find("object="), std::string::npos) << "no free-text label: " << series;
    EXPECT_EQ(series.find("set="), std::string::npos) << "no per-set id by default: " << series;
  }
  // Errors by kind: one family, a kind label per series.
  CounterSet& cls = classCounters("plugin", "exposition-test");
  cls.addShared(classError(ErrorKind::kPeerLost), 2);
  cls.addShared(classError(ErrorKind::kRetries));
  const auto withClass = parseStrict(prometheusText(Registry::process()));
  const std::string lk = "{face=\"plugin\",class=\"exposition-test\",kind=\"";
  EXPECT_EQ(withClass.at("pact_class_errors_total" + lk + "peer_lost\"}"), 2);
  EXPECT_EQ(withClass.at("pact_class_errors_total" + lk + "retries\"}"), 1);
  EXPECT_EQ(withClass.at("pact_class_errors_total" + lk + "other\"}"), 0);
  EXPECT_EQ(&classCounters("plugin", "exposition-test"), &cls) << "one set per class";
  // Every counter of each live set's catalog, once.
  for (const CounterSet* s : {&a, &c}) {
    const std::string l = s == &a ? la : lc;
    for (const CounterInfo& info : s->catalog().counters) {
      const std::string n = std::string("pact_") + scopeName(s->catalog().scope) + "_" + info.name + (info.gauge ? "" : "_total");
      EXPECT_TRUE(samples.count(n + l)) << n << l;
    }
  }
}

// Comms with the same labels are one series (what sum by (peer) wants, bounded at any number of
// comms); comms to another host are another.
TEST(Exposition, CommsWithTheSameLabelsAreOneSeries) {
  std::vector<std::unique_ptr<CounterSet>> comms;
  for (int i = 0; i < 100; ++i) {
    comms.push_back(std::make_unique<CounterSet>(kCommCatalog, "send comm to 10.9.0.1:" + std::to_string(4000 + i), commTo("10.9.0.1")));
    comms.back()->add(kMessages, 2);
  }
  CounterSet other(kCommCatalog, "send comm to 10.9.0.2:4000", commTo("10.9.0.2"));
  other.add(kMessages, 5);
  const auto samples = parseStrict(prometheusText(Registry::process()));
  EXPECT_EQ(samples.at("pact_comm_messages_total" + std::string("{direction=\"send\",device=\"lo\",class=\"0\",peer=\"10.9.0.1\"}")), 200);
  EXPECT_EQ(samples.at("pact_comm_messages_total" + std::string("{direction=\"send\",device=\"lo\",class=\"0\",peer=\"10.9.0.2\"}")), 5);
  size_t series = 0;
  for (const auto& [k, v] : samples)
    if (k.starts_with("pact_comm_messages_total{") && k.find("10.9.0.") != std::string::npos) ++series;
  EXPECT_EQ(series, 2u) << "101 comms, two peers: two series";
}

// A closed set's counters stay in its series (a Prometheus counter never goes down); its gauges go.
TEST(Exposition, AClosedSetsCountersStayAndItsGaugesGo) {
  const Labels labels{{"engine", "closing-engine"}};
  const std::string l = "{engine=\"closing-engine\"}";
  {
    CounterSet gone(kEngineCatalog, "engine closing-engine", labels);
    gone.add(kCommitted, 4);
    gone.set(kOpenTransfers, 2);
    const auto live = parseStrict(prometheusText(Registry::process()));
    EXPECT_EQ(live.at("pact_engine_committed_total" + l), 4);
    EXPECT_EQ(live.at("pact_engine_open_transfers" + l), 2);
  }
  const auto after = parseStrict(prometheusText(Registry::process()));
  EXPECT_EQ(after.at("pact_engine_committed_total" + l), 4) << "the counter did not go down";
  EXPECT_EQ(after.at("pact_engine_open_transfers" + l), 0) << "the gauge's level went with its set";
  CounterSet again(kEngineCatalog, "engine closing-engine", labels);
  again.add(kCommitted, 1);
  EXPECT_EQ(parseStrict(prometheusText(Registry::process())).at("pact_engine_committed_total" + l), 5);
}

// PACT_METRICS_PER_COMM: each comm and its lanes a series of their own (comm="ID"), what closed
// comms counted under comm="closed"; sets of no comm are as without it.
TEST(Exposition, PerCommSeriesWhenAskedFor) {
  const std::string base = "direction=\"send\",device=\"lo\",class=\"7\",peer=\"10.9.1.1\"";
  CounterSet kept(kCommCatalog, "send comm to 10.9.1.1:1", commTo("10.9.1.1", "7"));
  kept.add(kMessages, 3);
  Labels laneLabels = commTo("10.9.1.1", "7");
  laneLabels.push_back({"lane", "1"});
  laneLabels.push_back({"rail", "lo"});
  CounterSet lane(kLaneCatalog, "lane 1 of send comm to 10.9.1.1:1", laneLabels, kept.id());
  lane.add(kLaneBytes, 64);
  {
    CounterSet closed(kCommCatalog, "send comm to 10.9.1.1:2", commTo("10.9.1.1", "7"));
    closed.add(kMessages, 4);
  }
  const std::string id = std::to_string(kept.id());
  const auto per = parseStrict(prometheusText(Registry::process(), true));
  EXPECT_EQ(per.at("pact_comm_messages_total{" + base + ",comm=\"" + id + "\"}"), 3);
  EXPECT_EQ(per.at("pact_comm_messages_total{" + base + ",comm=\"closed\"}"), 4);
  EXPECT_EQ(per.at("pact_lane_bytes_total{" + base + ",lane=\"1\",rail=\"lo\",comm=\"" + id + "\"}"), 64)
      << "a lane carries its comm's id";
  EXPECT_FALSE(per.count("pact_comm_messages_total{" + base + "}"));
  const auto summed = parseStrict(prometheusText(Registry::process()));
  EXPECT_EQ(summed.at("pact_comm_messages_total{" + base + "}"), 7) << "off: one series, the closed comm's kept";
}

TEST(Exposition, LabelValuesAreEscaped) {
  CounterSet odd(kEngineCatalog, "engine odd", {{"engine", "a\"b\\c\nd"}});
  odd.add(kCommitted, 1);
  const std::string text = prometheusText(Registry::process());
  EXPECT_NE(text.find("engine=\"a\\\"b\\\\c\\nd\""), std::string::npos);
  const auto samples = parseStrict(text);
  EXPECT_EQ(escapeLabelValue("x\"y\\z\n"), "x\\\"y\\\\z\\n");
  EXPECT_FALSE(samples.empty());
}

// A sysfs tree of its own (a fake: this machine has no RDMA port): what nicText reads.
TEST(Exposition, NicCountersComeFromSysfsBesidePactsOwn) {
  const std::string root = ::testing::TempDir() + "pact-sys-" + std::to_string(getpid());
  ::mkdir(root.c_str(), 0755);
  auto put = [&](const std::string& rel, const std::string& text) {
    const std::string path = root + rel;
    for (size_t i = root.size() + 1; i < path.size(); ++i)
      if (path[i] == '/') ::mkdir(path.substr(0, i).c_str(), 0755);
    std::ofstream(path) << text;
  };
  put("/class/net/eth9/statistics/rx_bytes", "100\n");
  put("/class/net/eth9/statistics/tx_bytes", "200\n");
  put("/class/net/eth9/statistics/odd-name", "5\n");
  put("/class/net/eth9/statistics/not_a_number", "x\n");
  put("/class/infiniband/mlx9_0/ports/1/counters/port_xmit_data", "7\n");
  put("/class/infiniband/mlx9_0/ports/1/hw_counters/rnr_nak_retry_err", "3\n");
  const std::string text = nicText({"eth9", "mlx9_0:1", "absent0", "eth9"}, root);
  const auto samples = parseStrict(text);
  EXPECT_EQ(samples.at("pact_netdev_rx_bytes_total{device=\"eth9\"}"), 100);
  EXPECT_EQ(samples.at("pact_netdev_tx_bytes_total{device=\"eth9\"}"), 200);
  EXPECT_EQ(samples.at("pact_netdev_odd_name_total{device=\"eth9\"}"), 5) << "names made valid";
  EXPECT_EQ(samples.at("pact_ib_port_port_xmit_data_total{device=\"mlx9_0:1\"}"), 7);
  EXPECT_EQ(samples.at("pact_ib_hw_rnr_nak_retry_err_total{device=\"mlx9_0:1\"}"), 3);
  EXPECT_EQ(samples.size(), 5u) << "nothing for an absent device or an unreadable value, a device once";
  EXPECT_NE(text.find("# HELP pact_netdev_rx_bytes_total the kernel's /sys/class/net/DEV/statistics/rx_bytes"), std::string::npos);
  EXPECT_EQ(nicText({}, root), "");
  std::filesystem::remove_all(root);
}

// TCP_INFO of the process's connections: a real loopback connection shows on device lo with both
// ends' addresses, parses strictly, and after it closes the device's retransmit total stays
// (a counter never goes down) while its open connections drop back.
TEST(Exposition, TcpConnectionsOfTheDevicesAreRead) {
  const auto before = parseStrict(tcpText({"lo"}));
  const double openBefore = before.count("pact_tcp_connections{device=\"lo\"}") ? before.at("pact_tcp_connections{device=\"lo\"}") : 0;
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const int server = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  ASSERT_EQ(::send(client, "x", 1, 0), 1);
  char c = 0;
  ASSERT_EQ(::recv(server, &c, 1, 0), 1);
  const std::string port = std::to_string(ntohs(a.sin_port));

  const std::string text = tcpText({"lo"});
  const auto open = parseStrict(text);
  EXPECT_EQ(open.at("pact_tcp_connections{device=\"lo\"}"), openBefore + 2) << text;
  int ends = 0;
  for (const auto& [series, v] : open)
    if (series.starts_with("pact_tcp_conn_rtt_us{device=\"lo\"") && series.find(":" + port + "\"") != std::string::npos) ++ends;
  EXPECT_EQ(ends, 2) << "both ends of the connection, by their addresses:\n" << text;
  EXPECT_TRUE(open.count("pact_tcp_retransmits_total{device=\"lo\"}")) << text;
  const std::string other = tcpText({"no-such-device"});
  EXPECT_EQ(other.find("pact_tcp_conn_"), std::string::npos) << "connections of a device not named:\n" << other;
  EXPECT_EQ(other.find("pact_tcp_connections{"), std::string::npos) << other;
  EXPECT_NE(other.find("pact_tcp_retransmits_total{device=\"lo\"}"), std::string::npos)
      << "lo's total stays while lo is not read (a counter does not vanish):\n" << other;

  ::close(client);
  ::close(server);
  ::close(listener);
  const auto after = parseStrict(tcpText({"lo"}));
  EXPECT_EQ(after.at("pact_tcp_connections{device=\"lo\"}"), openBefore);
  EXPECT_GE(after.at("pact_tcp_retransmits_total{device=\"lo\"}"), open.at("pact_tcp_retransmits_total{device=\"lo\"}"));
}

TEST(ListenAddressParser, PortsAndAddresses) {
  EXPECT_EQ(*ListenAddressParser::parse(""), "");
  EXPECT_EQ(*ListenAddressParser::parse("9400"), "127.0.0.1:9400") << "a port alone: loopback only";
  EXPECT_EQ(*ListenAddressParser::parse(" 0.0.0.0:9400 "), "0.0.0.0:9400");
  EXPECT_EQ(*ListenAddressParser::parse("[::1]:0"), "[::1]:0");
  for (const char* bad : {"abc", "70000", "-1", "10.0.0:80", "host:80", "[::1:80", "1.2.3.4:", "[zz]:1"}) {
    auto r = ListenAddressParser::parse(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("expected"), std::string::npos) << r.error().message;
    }
  }
}

// GET over a real socket; returns the whole response.
std::string httpGet(const std::string& address, const std::string& path) {
  const size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  std::string resp;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) break;  // bounded: a hang fails the checks below
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return resp;
}

// The process's one exporter: a kernel-chosen port on loopback and a file. Later starts keep it.
TEST(Exporter, ServesMetricsOverHttpAndWritesTheFile) {
  const std::string file = ::testing::TempDir() + "pact-metrics-" + std::to_string(getpid()) + ".prom";
  startExporter({"127.0.0.1:0", file, std::chrono::milliseconds(0)});
  const std::string address = exporterAddress();
  ASSERT_FALSE(address.empty());
  EXPECT_EQ(address.rfind("127.0.0.1:", 0), 0u);
  startExporter({"127.0.0.1:1", "", {}});
  EXPECT_EQ(exporterAddress(), address) << "a second start keeps the first exporter";

  CounterSet s(kEngineCatalog, "engine http", {{"engine", "http"}});
  s.add(kCommitted, 5);
  const std::string resp = httpGet(address, "/metrics");
  EXPECT_EQ(resp.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << resp.substr(0, 200);
  EXPECT_NE(resp.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  const size_t body = resp.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  EXPECT_NE(resp.find("Content-Length: " + std::to_string(resp.size() - body - 4) + "\r\n"), std::string::npos);
  const auto samples = parseStrict(resp.substr(body + 4));
  EXPECT_EQ(samples.at("pact_engine_committed_total{engine=\"http\"}"), 5);
  EXPECT_EQ(httpGet(address, "/nothing").rfind("HTTP/1.0 404", 0), 0u);

  flushMetricsFile();
  std::ifstream in(file);
  ASSERT_TRUE(in.good()) << file;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("engine=\"http\""), std::string::npos);
  parseStrict(text);
  std::remove(file.c_str());

  stopExporter();  // joined, the file written a last time
  EXPECT_TRUE(exporterAddress().empty());
  EXPECT_TRUE(std::ifstream(file).good()) << "the last word";
  std::remove(file.c_str());
}

}  // namespace
}  // namespace pact::telemetry
