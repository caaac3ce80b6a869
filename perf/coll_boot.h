// The ranks of a `pact-perf coll` job and how they meet: forked on one host (-np N), or started by
// a launcher (mpirun, Slurm, torchrun), and a small TCP store that swaps the plugin's 128-byte
// handles. Rank 0 serves the store; every other rank keeps one connection to it for the whole
// job, so a rank that dies closes its connection, rank 0 ends the job, and every rank's
// connection closes: a dead rank fails the others within one look at that connection
// (Job::alive), never a hang.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pact::perf::coll {

// Prints "pact-perf coll[rank R]: msg" to stderr and exits with status 1.
[[noreturn]] void fatal(const std::string& msg);

struct Launch {
  int rank = 0;
  int size = 1;
  std::string how;   // "fork", "mpirun", "slurm", "torchrun", "single"
  std::string addr;  // the store's address (rank 0 listens there)
  int port = 0;      // 0: any (fork)
};

// Where the ranks come from: -np N > 0 forks N ranks here; otherwise the launcher's variables
// (OMPI_COMM_WORLD_RANK/SIZE, SLURM_PROCID/NTASKS, RANK/WORLD_SIZE), the store at
// MASTER_ADDR:MASTER_PORT (default 127.0.0.1 and 29500 + the job id mod 1000), or one rank.
// Malformed variables end the process with a message naming them.
Launch detectLaunch(int np);

class Job {
 public:
  // Starts the store (rank 0) or joins it (retrying for timeout_s). With how == "fork", forks
  // size - 1 ranks after the store listens; returns in every rank.
  static Job start(Launch l, double timeout_s);
  Job(Job&&) noexcept;
  Job& operator=(Job&&) = delete;
  ~Job();

  int rank() const { return l_.rank; }
  int size() const { return l_.size; }
  const Launch& launch() const { return l_; }
  // Every rank's bytes, in rank order (blocking; every rank must call it).
  std::vector<std::string> allgather(const std::string& mine);
  void barrier() { (void)allgather({}); }
  // False once another rank left the job (its connection closed); cheap enough for a progress
  // loop only every few hundred iterations (one poll()).
  bool alive();
  // Rank 0 of a forked job: waits for the other ranks; true if every one exited with 0.
  bool reap();

 private:
  explicit Job(Launch l) : l_(std::move(l)) {}
  Launch l_;
  int listen_ = -1;
  std::vector<int> peers_;   // rank 0: the connection of rank i at i (peers_[0] unused)
  int server_ = -1;          // ranks > 0: the connection to rank 0
};

}  // namespace pact::perf::coll
