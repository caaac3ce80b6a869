/* pact's control API beside the NCCL net ABI: extra calls exported by libnccl-net-pact.so under
 * the pact_ prefix, for tools and tests that hold a comm pointer the plugin handed out.
 * Thread safety: may be called from any thread; takes the comm's device lock. */
#ifndef PACT_NCCL_EXT_H
#define PACT_NCCL_EXT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PACT_MAX_LANES 16

typedef struct {
  uint64_t messages;             /* requests completed */
  uint64_t pieces;               /* UCX operations (message pieces) completed */
  uint64_t pieces_out_of_order;  /* receive: a piece landed before a lower piece of its message */
  uint64_t messages_out_of_order;/* a message completed while an earlier one was in flight */
  int unordered;                 /* the comm's channel: 0 ordered, 1 unordered */
  int lanes;                     /* send comm: lanes in use; receive comm: the sender's lanes */
  uint64_t chunk;                /* piece size of an unordered channel */
  uint64_t lane_pieces[PACT_MAX_LANES]; /* send comm: pieces given to each lane */
  uint64_t lane_bytes[PACT_MAX_LANES];  /* send comm: bytes given to each lane */
  uint64_t faults_injected;      /* PACT_FAULT decisions applied to this comm */
  uint64_t retransmits;          /* send comm: lost attempts (injected) sent again */
  uint64_t duplicates_filtered;  /* receive comm: copies of consumed pieces drained from UCX's
                                    unexpected queue (PACT_FAULT dup, a re-send's first copy) */
  uint64_t gpu_flushes;          /* receive comm: iflush calls served by the CUDA driver's flush */
  uint64_t gpu_flush_reads;      /* receive comm: loopback reads iflush posted (one per buffer) */
} pact_comm_stats_t;

/* Fills *out for a send or receive comm returned by connect/accept. 0 on success, -1 when comm
 * is not a live pact comm or out is NULL. */
int pact_comm_stats(void* comm, pact_comm_stats_t* out);
typedef int (*pact_comm_stats_fn)(void* comm, pact_comm_stats_t* out);

/* Every counter of the comm, by name, in the order of the comm catalog (`pact-info --counters`
 * and docs/observability.md list and explain them; "bytes" is the payload bytes sent or
 * received): fills names[i] and values[i] for the first min(max, count) counters and returns
 * count, the catalog's size (call with max 0 to size the arrays), or -1 when comm is not a live
 * pact comm. New counters are only ever added at the end. The names live as long as the plugin
 * is loaded. */
int pact_comm_counters(void* comm, const char** names, uint64_t* values, size_t max);
typedef int (*pact_comm_counters_fn)(void* comm, const char** names, uint64_t* values, size_t max);

/* ---- the class contract (docs/plugin.md, "The class contract") ------------------------------ */

/* Why a comm failed, as pact_comm_contract reports it: the contract's own outcomes are told apart
 * from the rest (NCCL itself only sees ncclRemoteError). */
#define PACT_COMM_OK 0         /* not failed */
#define PACT_COMM_EPOCH 1      /* a message of another model epoch (or without one) arrived */
#define PACT_COMM_CHECKSUM 2   /* a piece's check did not match on every attempt (verify, retries) */
#define PACT_COMM_DEADLINE 3   /* a message did not complete within the class's timeout */
#define PACT_COMM_VETOED 4     /* the commit hook vetoed a message */
#define PACT_COMM_PEER 5       /* the peer failed the comm, died or left */
#define PACT_COMM_OTHER 6      /* anything else (a transport error, a refused piece, ...) */

typedef struct {
  uint32_t struct_size;        /* set by the caller to sizeof(pact_comm_contract_t); fields are
                                  only ever added, and only those that fit are written */
  int verify;                  /* 0 none, 1 crc32c, 2 xxh3 (what the comm does, both classes
                                  considered) */
  int retries;
  uint64_t timeout_us;         /* 0: none */
  int sealed;                  /* 1: messages carry seals (epoch, size, checks) */
  int priority;                /* send comm: the class's priority */
  uint64_t credit_budget;      /* send comm: the class's budget to this peer (0: none) */
  uint64_t credit_in_flight;   /* send comm: bytes of the class in flight to this peer now */
  uint64_t credit_peak;        /* send comm: the most ever in flight at once */
  uint64_t credit_refusals;    /* send comm: isend calls of this comm answered NULL by credits */
  uint64_t priority_holds;     /* send comm: times it stood back (held its waiting pieces) for a
                                  higher class with work to the same peer */
  uint64_t bytes_in_flight;    /* send comm: bytes its lanes handed to UCX, not completed yet */
  uint64_t checksum_mismatches;/* receive comm: pieces whose check did not match */
  uint64_t retransmits;        /* send comm: pieces sent again */
  int error;                   /* PACT_COMM_* */
  char reason[256];            /* the failure as logged (truncated), "" while not failed */
} pact_comm_contract_t;

/* Fills *out (up to out->struct_size bytes) for a send or receive comm. 0 on success, -1 when comm
 * is not a live pact comm, out is NULL or struct_size is too small for the first two fields. */
int pact_comm_contract(void* comm, pact_comm_contract_t* out);
typedef int (*pact_comm_contract_fn)(void* comm, pact_comm_contract_t* out);

/* ---- rail failover (docs/reliability.md, "Rail failover") ------------------------------------ */

#define PACT_MAX_RAILS 8

/* A comm over a virtual device of several rails survives the loss of any rail but the last: each
 * rail to the peer is watched (PACT_RAIL_TIMEOUT); a lane whose rail fails moves to a live one and
 * what it had in flight is sent again there; the rail is taken back once it answers again. */
typedef struct {
  uint32_t struct_size;        /* set by the caller to sizeof(pact_comm_rails_t); fields are only
                                  ever added, and only those that fit are written */
  int rails;                   /* rails the comm may use (1: no failover) */
  int rails_up;                /* of those, taken as live now */
  int watched;                 /* 1: the rails are probed (PACT_RAIL_TIMEOUT not 0, peer probes) */
  uint64_t failovers;          /* times a rail of the comm was taken out */
  uint64_t recoveries;         /* times one was taken back */
  uint64_t pieces_resent;      /* send comm: pieces sent again on another rail after a failover */
  uint64_t bytes_resent;       /* send comm: their bytes */
  int rail_up[PACT_MAX_RAILS];            /* 1: live, 0: out */
  uint64_t rail_down_us[PACT_MAX_RAILS];  /* time each rail has been out so far */
  uint64_t rail_bytes[PACT_MAX_RAILS];    /* send comm: bytes handed to UCX on each rail */
  uint64_t stranded_receives;  /* receive comm: messages reported while UCX still held a receive
                                  stranded on an out rail (left to UCX; docs/reliability.md) */
} pact_comm_rails_t;

/* Fills *out (up to out->struct_size bytes) for a send or receive comm. 0 on success, -1 when comm
 * is not a live pact comm, out is NULL or struct_size is too small for the first two fields. */
int pact_comm_rails(void* comm, pact_comm_rails_t* out);
typedef int (*pact_comm_rails_fn)(void* comm, pact_comm_rails_t* out);

/* 1 when rail failover can be on with the UCX this process runs, 0 when not, with the reason in
 * why (up to len bytes, NUL-terminated; why may be NULL). It is on with every UCX pact builds with
 * (validated: 1.13, 1.14, 1.22), so this answers 1 and an empty why. */
int pact_rail_failover_available(char* why, size_t len);
typedef int (*pact_rail_failover_available_fn)(char* why, size_t len);

/* Epoch fencing. Sets this process's model epoch (any value; the application's weights version)
 * and turns fencing on: from then on every receive comm connected afterwards asks for seals, each
 * message carries its sender's epoch at isend, and a message whose epoch differs from the
 * receiver's current one (or that carries none) is never reported done: test() fails the comm
 * (ncclRemoteError; pact_comm_contract says PACT_COMM_EPOCH and names both epochs). A receive comm
 * connected before fencing began reports nothing more once it is on (fail closed): enable fencing
 * before the communicators are created, then call it again at each weights update. Always 0. */
int pact_nccl_set_epoch(uint64_t epoch);
typedef int (*pact_nccl_set_epoch_fn)(uint64_t epoch);
/* The current model epoch (0 before the first pact_nccl_set_epoch). */
uint64_t pact_nccl_epoch(void);
typedef uint64_t (*pact_nccl_epoch_fn)(void);

/* What the commit hook is told of a received message, after its seal was judged (epoch, size,
 * checks) and before test() reports it done. Valid during the call only. */
typedef struct {
  uint32_t struct_size;        /* sizeof(pact_nccl_message_t) of the plugin */
  void* comm;                  /* the receive comm */
  const char* peer;            /* "ip:port" of the sending process's control connection */
  const char* traffic_class;   /* "DEFAULT" or NCCL's class number ("3") */
  int buffer;                  /* which buffer of a multi-receive */
  uint32_t tag;                /* the NCCL tag */
  uint64_t bytes;
  uint64_t epoch;              /* the sender's model epoch */
  int verify;                  /* 0 none, 1 crc32c, 2 xxh3 */
  uint64_t checksum;           /* the message's check: the piece's for a one-piece message, else the
                                  kind's digest over the pieces' checks; 0 without verify */
} pact_nccl_message_t;
/* Return 0 to accept; anything else vetoes: the comm fails (PACT_COMM_VETOED, the value named). */
typedef int (*pact_nccl_commit_hook_fn)(void* user, const pact_nccl_message_t* msg);
/* Installs the hook (NULL removes it) for every receive comm; called once per message, on the thread
 * that calls test(), possibly several threads at once for different comms. Turns fencing on, as
 * pact_nccl_set_epoch does. Always 0. */
int pact_nccl_set_commit_hook(pact_nccl_commit_hook_fn hook, void* user);
typedef int (*pact_nccl_set_commit_hook_fn)(pact_nccl_commit_hook_fn hook, void* user);

/* PACT_FAULT decisions applied by every comm of this process so far, closed comms included
 * (a goodbye lost to lose_remote_done happens at close). */
uint64_t pact_faults_injected(void);
typedef uint64_t (*pact_faults_injected_fn)(void);

typedef struct {
  int64_t comms;              /* send and receive comms not closed */
  int64_t registrations;      /* regMr handles not deregistered */
  int64_t orphaned_requests;  /* requests of closed comms that UCX still holds (a peer lost
                                 mid-transfer: freed when UCX lets go, or kept to the end) */
} pact_plugin_resources_t;

/* What the plugin holds in this process, for leak checks after close. Closes finish in the
 * background; this first lets that work run (at most 1 s). 0 on success, -1 before init (or
 * after the last finalize) or with out NULL. */
int pact_plugin_resources(pact_plugin_resources_t* out);
typedef int (*pact_plugin_resources_fn)(pact_plugin_resources_t* out);

/* Writes the plugin's metrics now (the Prometheus text PACT_METRICS_PORT serves) to path, or to
 * PACT_METRICS_FILE when path is NULL: a snapshot on demand, whatever the interval. 0 on success,
 * -1 (the reason logged) when there is no file or it cannot be written. */
int pact_plugin_metrics_write(const char* path);
typedef int (*pact_plugin_metrics_write_fn)(const char* path);

/* Writes the process's timeline now (PACT_TRACE_FILE's Chrome trace / Perfetto JSON: the plugin's
 * requests, one track per lane, and any engines') to path, or to PACT_TRACE_FILE when path is
 * NULL. It is also written at the last finalize and at exit. 0 on success, -1 (the reason logged)
 * when tracing is off (PACT_TRACE_FILE unset) or the file cannot be written. */
int pact_plugin_trace_write(const char* path);
typedef int (*pact_plugin_trace_write_fn)(const char* path);

/* NCCL's profiler (net API v10 and later). pact starts an event for every isend and for every
 * buffer of an irecv that NCCL gave a handle (phandle), with the callback NCCL passed to init,
 * and ends it with an update-and-stop when test reports the request done or failed. pluginId is
 * PACT_NET_PROFILER_ID (a type of pact's own: NCCL assigns 1 to IB and 2 to Socket); extData
 * points to a pact_net_event_t, valid for the duration of the call (copy what you keep). */
#define PACT_NET_PROFILER_TYPE 0x50 /* 'P' */
#define PACT_NET_PROFILER_VERSION 1
#define PACT_NET_PROFILER_ID (((int64_t)PACT_NET_PROFILER_TYPE << 16) | PACT_NET_PROFILER_VERSION)
#define PACT_NET_EVENT_SEND 1
#define PACT_NET_EVENT_RECV 2
typedef struct {
  uint32_t struct_size; /* sizeof(pact_net_event_t) of the plugin: fields are only ever added */
  uint32_t kind;        /* PACT_NET_EVENT_SEND or PACT_NET_EVENT_RECV */
  uint64_t comm;        /* the send or receive comm (its handle, as an id) */
  uint64_t bytes;       /* start: the buffer's posted size; stop: the bytes that moved */
  int32_t buffer;       /* which buffer of a multi-receive (0 for a send) */
  int32_t result;       /* stop: the request's ncclResult_t (0: done) */
  uint32_t pieces;      /* stop: the UCX operations of the whole request (0 at start) */
  uint32_t lanes;       /* stop: the lanes those went over (0 at start) */
} pact_net_event_t;

#ifdef __cplusplus
}
#endif
#endif
