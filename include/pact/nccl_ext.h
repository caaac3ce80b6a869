/* pact's control API beside the NCCL net ABI: extra calls exported by libnccl-net-pact.so under
 * the pact_ prefix, for tools and tests that hold a comm pointer the plugin handed out.
 * Thread safety: may be called from any thread; takes the comm's device lock. */
#ifndef PACT_NCCL_EXT_H
#define PACT_NCCL_EXT_H

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
  uint64_t duplicates_filtered;  /* send comm: injected duplicates discarded below tag matching */
  uint64_t gpu_flushes;          /* receive comm: iflush calls served by the CUDA driver's flush */
  uint64_t gpu_flush_reads;      /* receive comm: loopback reads iflush posted (one per buffer) */
} pact_comm_stats_t;

/* Fills *out for a send or receive comm returned by connect/accept. 0 on success, -1 when comm
 * is not a live pact comm or out is NULL. */
int pact_comm_stats(void* comm, pact_comm_stats_t* out);
typedef int (*pact_comm_stats_fn)(void* comm, pact_comm_stats_t* out);

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
