// p2p_bandwidth_latency.cu -- the course's GPU peer-to-peer bandwidth and latency test.
//
// Written for the course "Distributed Deep Learning: GPU System Topology" from the CUDA
// Runtime API documentation. It prints tables laid out like those of NVIDIA's
// p2pBandwidthLatencyTest sample, so a reader who knows that tool reads these at once,
// but it measures in its own way (see README.md):
//
//   * bandwidth: `reps` back-to-back copies of `--size` bytes (1 GiB by default) between
//     one pair of CUDA events, after one untimed warm-up copy; GB/s = 1e9 bytes/s.
//   * copy engine (--copy ce): cudaMemcpyPeerAsync. With peer access OFF the driver
//     stages the copy through host memory; with peer access ON the DMA engines move the
//     data directly over NVLink or PCIe.
//   * SM copy (--copy sm): a kernel with 16-byte vector loads/stores copies the data;
//     "P2P Writes" runs it on the source GPU (remote stores), "P2P Reads" on the
//     destination GPU (remote loads). SM copies need peer access, so there is no SM
//     figure with P2P off.
//   * GPU-timed latency: `--latency-size` bytes (4 by default) copied again and again in
//     batches of 64 back-to-back copies between two events; the stream is held by a
//     small kernel until all 64 copies are queued, so the GPU never waits for the CPU.
//     The table shows the median over batches of (batch time / 64).
//     For SM: a ping-pong between one thread on each GPU (round trip / 2).
//   * CPU-initiated latency: the host's wall clock for "issue one tiny copy (or one tiny
//     copy kernel) and wait for it", median over --latency-reps tries.
//
// Every CUDA call is checked; every copy that yields a number is validated (the source
// holds a pattern that depends on the word index and on the pair, the destination is
// poisoned before the copy and compared word by word after it). A failure prints the pair
// and the first bad word and exits non-zero: no number is printed for a failed copy.
//
// Exit codes: 0 success (also with one GPU: local copies only), 1 CUDA or runtime
// failure, 2 no GPU visible or bad command-line options, 3 validation failed.

#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kExitCuda = 1;
constexpr int kExitUsage = 2;  // also: no GPU visible
constexpr int kExitValidation = 3;

constexpr int kCopyThreads = 512;
constexpr int kPingPongTrials = 5;
constexpr uint64_t kHoldTimeoutNs = 2000000000ull;      // stream-hold kernel gives up after 2 s
constexpr uint64_t kPingPongTimeoutNs = 10000000000ull;  // ping-pong gives up after 10 s

FILE* g_out = stdout;  // human-readable tables; stderr when --json - takes stdout

// ---------------------------------------------------------------------------- errors
void check(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) {
        fflush(g_out);
        fprintf(stderr, "CUDA error at %s:%d: %s failed: %s (%s)\n", file, line, what,
                cudaGetErrorName(err), cudaGetErrorString(err));
        exit(kExitCuda);
    }
}
#define CK(call) check((call), #call, __FILE__, __LINE__)
// A kernel launch reports configuration errors only through cudaGetLastError.
#define CK_LAUNCH(what) check(cudaGetLastError(), what, __FILE__, __LINE__)

[[noreturn]] void usage_error(const std::string& msg) {
    fprintf(stderr, "p2p_bandwidth_latency: %s (see --help)\n", msg.c_str());
    exit(kExitUsage);
}

// ---------------------------------------------------------------------------- device code
// A 32-bit word that depends on its index and on a per-transfer seed (the SplitMix64
// finaliser): a copy that lands at the wrong offset or comes from the wrong pair fails.
__host__ __device__ inline uint32_t pattern_word(uint64_t index, uint32_t seed) {
    uint64_t z = index * 0x9E3779B97F4A7C15ull + (uint64_t(seed) + 1) * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return uint32_t(z >> 32);
}

// Fill words [0, n) with pattern(first + i); `invert` writes the bitwise complement, a
// "poison" that differs from the expected value in every word.
__global__ void fill_kernel(uint32_t* p, size_t n, uint64_t first, uint32_t seed, int invert) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint32_t v = pattern_word(first + i, seed);
        p[i] = invert ? ~v : v;
    }
}

struct CheckResult {
    unsigned long long first_bad;
    unsigned long long bad_count;
};

__global__ void check_kernel(const uint32_t* p, size_t n, uint64_t first, uint32_t seed,
                             CheckResult* r) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (p[i] != pattern_word(first + i, seed)) {
            atomicAdd(&r->bad_count, 1ull);
            atomicMin(&r->first_bad, (unsigned long long)i);
        }
    }
}

// Bandwidth copy on the SMs: 16-byte loads and stores, four independent loads in flight
// per thread before the stores (remote loads take about a microsecond, so many must be
// outstanding), grid-stride so any grid size covers any length.
__global__ void __launch_bounds__(kCopyThreads) copy_kernel(uint4* dst, const uint4* src, size_t n) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = src[i];
        const uint4 b = src[i + stride];
        const uint4 c = src[i + 2 * stride];
        const uint4 d = src[i + 3 * stride];
        dst[i] = a;
        dst[i + stride] = b;
        dst[i + 2 * stride] = c;
        dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}

// Tiny copies for the CPU-initiated SM latency (one warp, 4-byte words).
__global__ void copy_words_kernel(uint32_t* dst, const uint32_t* src, size_t n) {
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

__device__ inline uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Holds its stream until the host sets *release (host-mapped memory), so that a batch of
// tiny copies queued behind it runs back to back on the GPU instead of at the pace the
// CPU can queue them. Gives up after a timeout and says so, so it can never hang.
__global__ void hold_stream_kernel(volatile int* release, volatile int* timed_out, uint64_t timeout_ns) {
    const uint64_t t0 = global_ns();
    while (*release == 0) {
        if (global_ns() - t0 > timeout_ns) {
            *timed_out = 1;
            return;
        }
    }
}

// One thread on each GPU passes a counter back and forth `rounds` times. Write mode:
// each side stores into the other's memory and polls its own; read mode: each side
// stores into its own memory and polls the other's. status: 2 done, 1 timed out.
__global__ void pingpong_kernel(volatile int* write_to, volatile int* poll_from, int rounds,
                                int initiator, uint64_t timeout_ns, volatile int* status) {
    const uint64_t t0 = global_ns();
    for (int k = 1; k <= rounds; ++k) {
        if (initiator) *write_to = k;
        while (*poll_from != k) {
            if (global_ns() - t0 > timeout_ns) {
                *status = 1;
                return;
            }
        }
        if (!initiator) *write_to = k;
    }
    *status = 2;
}

// ---------------------------------------------------------------------------- options
struct Options {
    bool ce = true, sm = true;          // --copy both
    bool write = true, read = false;    // --direction write
    size_t size = size_t(1) << 30;      // --size
    int reps = 10;                      // --reps
    int warmup = 1;                     // --warmup
    size_t latency_size = 4;            // --latency-size
    int latency_reps = 4096;            // --latency-reps
    int latency_batch = 256;            // --latency-batch: tiny copies queued between one pair of events
    bool ce_uva = false;                // --ce-api uva: cudaMemcpyAsync(cudaMemcpyDefault) for peer copies
    double link_peak = 0.0;             // --link-peak GB/s per direction, 0 = unknown
    std::vector<int> gpus;              // --gpus (empty: all)
    std::string json;                   // --json FILE or -
    bool validate = true;               // --no-validate
    bool test_corrupt = false;          // --test-corrupt
    int format_demo = 0;                // --format-demo N
    std::string copy_name = "both", direction_name = "write", ce_api_name = "peer";
};

const char* kHelp =
    "usage: p2p_bandwidth_latency [options]\n"
    "\n"
    "GPU peer-to-peer bandwidth and latency for every ordered pair of GPUs, with peer access\n"
    "off (copies staged through host memory) and on.\n"
    "\n"
    "  --copy ce|sm|both      copy engine (cudaMemcpyPeerAsync), SM kernel, or both (default both)\n"
    "  --direction write|read|both\n"
    "                         P2P writes (run on the source GPU) or reads (run on the\n"
    "                         destination GPU) (default write)\n"
    "  --size BYTES           bandwidth message size, suffix K/M/G = KiB/MiB/GiB (default 1G)\n"
    "  --reps N               timed back-to-back copies per bandwidth figure (default 10)\n"
    "  --warmup N             untimed copies before each bandwidth figure (default 1)\n"
    "  --latency-size BYTES   latency message size, a multiple of 4 (default 4)\n"
    "  --latency-reps N       tiny copies per latency figure (default 4096)\n"
    "  --latency-batch N      tiny copies queued back to back per GPU-timed batch (default 256)\n"
    "  --ce-api peer|uva      copy-engine call for copies between GPUs: cudaMemcpyPeerAsync\n"
    "                         (default) or cudaMemcpyAsync with cudaMemcpyDefault (UVA)\n"
    "  --link-peak GBPS       raw link rate per direction; adds %% of peak lines\n"
    "  --gpus LIST            comma-separated CUDA device ordinals (default: all)\n"
    "  --json FILE            also write a machine-readable result (FILE '-' = stdout;\n"
    "                         the tables then go to stderr)\n"
    "  --no-validate          skip checking the copied data (not recommended)\n"
    "  --test-corrupt         corrupt one destination word before validation, to show that\n"
    "                         validation catches it (the run then fails with exit code 3)\n"
    "  --format-demo N        print the output format for N synthetic GPUs without using\n"
    "                         any GPU (for parser tests; the numbers are NOT measurements)\n"
    "  --help                 this text\n"
    "\n"
    "Exit codes: 0 success (one GPU: local copies only), 1 CUDA/runtime failure,\n"
    "2 no GPU or bad options, 3 validation failed.\n";

size_t parse_size(const std::string& flag, const std::string& s) {
    if (s.empty()) usage_error(flag + " needs a value");
    char* end = nullptr;
    const double v = strtod(s.c_str(), &end);
    double mult = 1;
    std::string suffix(end);
    if (suffix == "K" || suffix == "KiB" || suffix == "k") mult = 1024.0;
    else if (suffix == "M" || suffix == "MiB") mult = 1024.0 * 1024;
    else if (suffix == "G" || suffix == "GiB") mult = 1024.0 * 1024 * 1024;
    else if (!suffix.empty()) usage_error(flag + ": cannot read size '" + s + "'");
    if (!(v > 0) || v * mult > 1e15) usage_error(flag + ": size must be positive, got '" + s + "'");
    return size_t(v * mult);
}

int parse_int(const std::string& flag, const std::string& s, int lo, int hi) {
    char* end = nullptr;
    const long v = strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < lo || v > hi)
        usage_error(flag + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "], got '" + s + "'");
    return int(v);
}

Options parse_options(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i], val;
        const size_t eq = a.find('=');
        bool has_inline = false;
        if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
            val = a.substr(eq + 1);
            a = a.substr(0, eq);
            has_inline = true;
        }
        auto value = [&]() -> std::string {
            if (has_inline) return val;
            if (i + 1 >= argc) usage_error(a + " needs a value");
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            fputs(kHelp, stdout);
            exit(0);
        } else if (a == "--copy") {
            o.copy_name = value();
            if (o.copy_name == "ce") { o.ce = true; o.sm = false; }
            else if (o.copy_name == "sm") { o.ce = false; o.sm = true; }
            else if (o.copy_name == "both") { o.ce = o.sm = true; }
            else usage_error("--copy must be ce, sm or both, got '" + o.copy_name + "'");
        } else if (a == "--direction") {
            o.direction_name = value();
            if (o.direction_name == "write") { o.write = true; o.read = false; }
            else if (o.direction_name == "read") { o.write = false; o.read = true; }
            else if (o.direction_name == "both") { o.write = o.read = true; }
            else usage_error("--direction must be write, read or both, got '" + o.direction_name + "'");
        } else if (a == "--size") {
            o.size = parse_size(a, value());
        } else if (a == "--reps") {
            o.reps = parse_int(a, value(), 1, 100000);
        } else if (a == "--warmup") {
            o.warmup = parse_int(a, value(), 0, 1000);
        } else if (a == "--latency-size") {
            o.latency_size = parse_size(a, value());
        } else if (a == "--latency-reps") {
            o.latency_reps = parse_int(a, value(), 1, 10000000);
        } else if (a == "--latency-batch") {
            o.latency_batch = parse_int(a, value(), 1, 1024);
        } else if (a == "--ce-api") {
            o.ce_api_name = value();
            if (o.ce_api_name == "peer") o.ce_uva = false;
            else if (o.ce_api_name == "uva") o.ce_uva = true;
            else usage_error("--ce-api must be peer or uva, got '" + o.ce_api_name + "'");
        } else if (a == "--link-peak") {
            const std::string s = value();
            char* end = nullptr;
            o.link_peak = strtod(s.c_str(), &end);
            if (s.empty() || *end != '\0' || !(o.link_peak >= 0) || !std::isfinite(o.link_peak))
                usage_error("--link-peak must be a number of GB/s, got '" + s + "'");
        } else if (a == "--gpus") {
            const std::string s = value();
            size_t start = 0;
            while (start <= s.size()) {
                const size_t comma = s.find(',', start);
                const std::string tok = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
                o.gpus.push_back(parse_int("--gpus", tok, 0, 1023));
                if (comma == std::string::npos) break;
                start = comma + 1;
            }
        } else if (a == "--json") {
            o.json = value();
        } else if (a == "--no-validate") {
            o.validate = false;
        } else if (a == "--validate") {
            o.validate = true;
        } else if (a == "--test-corrupt") {
            o.test_corrupt = true;
        } else if (a == "--format-demo") {
            o.format_demo = parse_int(a, value(), 1, 16);
        } else {
            usage_error("unknown option '" + a + "'");
        }
    }
    // SM copies move 16-byte vectors; keep every size a whole number of them.
    if (o.size % 16 != 0) usage_error("--size must be a multiple of 16 bytes");
    if (o.latency_size % 4 != 0) usage_error("--latency-size must be a multiple of 4 bytes");
    if (o.latency_size > o.size) usage_error("--latency-size must not exceed --size");
    if (o.test_corrupt && !o.validate) usage_error("--test-corrupt needs validation (drop --no-validate)");
    for (size_t i = 0; i < o.gpus.size(); ++i)
        for (size_t j = 0; j < i; ++j)
            if (o.gpus[i] == o.gpus[j]) usage_error("--gpus lists GPU " + std::to_string(o.gpus[i]) + " twice");
    return o;
}

// ---------------------------------------------------------------------------- results
struct Table {
    std::string key;        // e.g. uni_p2p_on, lat_gpu_p2p_on
    std::string method;     // ce | sm
    std::string direction;  // write | read | "" (P2P off)
    std::vector<double> v;  // n*n, NaN = not measured
};

struct Results {
    std::vector<int> labels;  // CUDA ordinals of the GPUs tested
    std::vector<std::string> names, bus_ids;
    std::vector<int> cc_major, cc_minor, sm_count;
    std::vector<size_t> memory;
    std::vector<int> pci_bus, pci_device, pci_domain;
    std::vector<int> access;  // n*n canAccessPeer (1 on the diagonal)
    std::vector<Table> tables;
    std::vector<std::string> notes;
    int driver = 0, runtime = 0;
    long long validated_copies = 0;
    int n() const { return int(labels.size()); }
};

std::string version_string(int v) {
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string variant_label(const Table& t) {
    // The parenthesised part of a block header, as NVIDIA's sample writes it for P2P writes
    // and reads, extended with the copy method.
    if (t.key.find("p2p_off") != std::string::npos) return "";
    std::string dir = t.direction == "read" ? "P2P Reads" : "P2P Writes";
    if (t.method == "sm") {
        const bool lat = t.key.rfind("lat_", 0) == 0;
        return " (" + dir + (lat ? ", SM kernel)" : ", SM copy)");
    }
    return " (" + dir + ")";
}

std::string header_for(const Table& t) {
    const bool on = t.key.find("p2p_on") != std::string::npos;
    const std::string state = on ? "Enabled" : "Disabled";
    if (t.key.rfind("uni_", 0) == 0)
        return "Unidirectional P2P=" + state + " Bandwidth" + variant_label(t) + " Matrix (GB/s)";
    if (t.key.rfind("bi_", 0) == 0)
        return "Bidirectional P2P=" + state + " Bandwidth" + variant_label(t) + " Matrix (GB/s)";
    return "P2P=" + state + " Latency" + variant_label(t) + " Matrix (us)";
}

void print_matrix(const Results& r, const char* corner, const std::vector<double>& v) {
    const int n = r.n();
    fprintf(g_out, "   %s", corner);
    for (int j = 0; j < n; ++j) fprintf(g_out, "%6d ", r.labels[j]);
    fprintf(g_out, "\n");
    for (int i = 0; i < n; ++i) {
        fprintf(g_out, "%6d ", r.labels[i]);
        for (int j = 0; j < n; ++j) {
            const double x = v[size_t(i) * n + j];
            if (std::isfinite(x)) fprintf(g_out, "%6.2f ", x);
            else fprintf(g_out, "%6s ", "n/a");
        }
        fprintf(g_out, "\n");
    }
}

void print_bandwidth_table(const Results& r, const Table& t) {
    fprintf(g_out, "%s\n", header_for(t).c_str());
    print_matrix(r, "D\\D", t.v);
    fflush(g_out);
}

void print_latency_tables(const Results& r, const Table& gpu, const Table& cpu) {
    fprintf(g_out, "%s\n", header_for(gpu).c_str());
    print_matrix(r, "GPU", gpu.v);
    fprintf(g_out, "\n");
    print_matrix(r, "CPU", cpu.v);
    fflush(g_out);
}

void print_preamble(const Results& r, const Options& o, bool demo) {
    fprintf(g_out, "[ddlab p2p_bandwidth_latency] GPU peer-to-peer bandwidth and latency test\n");
    if (demo)
        fprintf(g_out, "FORMAT DEMO: synthetic numbers from --format-demo, NOT a measurement\n");
    fprintf(g_out, "CUDA driver version: %s, runtime version: %s\n", version_string(r.driver).c_str(),
            version_string(r.runtime).c_str());
    std::string gpus;
    for (int i = 0; i < r.n(); ++i) gpus += (i ? "," : "") + std::to_string(r.labels[i]);
    fprintf(g_out,
            "Parameters: copy=%s direction=%s size=%zu reps=%d warmup=%d latency_size=%zu "
            "latency_reps=%d latency_batch=%d ce_api=%s validate=%s link_peak_gbps=%.2f gpus=%s\n",
            o.copy_name.c_str(), o.direction_name.c_str(), o.size, o.reps, o.warmup, o.latency_size,
            o.latency_reps, o.latency_batch, o.ce_api_name.c_str(), o.validate ? "on" : "off", o.link_peak, gpus.c_str());
    for (int i = 0; i < r.n(); ++i)
        fprintf(g_out,
                "Device: %d, %s, pciBusID: %x, pciDeviceID: %x, pciDomainID:%x, busId: %s, "
                "cc: %d.%d, memory: %zu MiB, SMs: %d\n",
                r.labels[i], r.names[i].c_str(), r.pci_bus[i], r.pci_device[i], r.pci_domain[i],
                r.bus_ids[i].c_str(), r.cc_major[i], r.cc_minor[i], r.memory[i] >> 20, r.sm_count[i]);
    const int n = r.n();
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
            if (i != j)
                fprintf(g_out, "Device=%d %s Access Peer Device=%d\n", r.labels[i],
                        r.access[size_t(i) * n + j] ? "CAN" : "CANNOT", r.labels[j]);
    fprintf(g_out, "P2P Connectivity Matrix\n     D\\D");
    for (int j = 0; j < n; ++j) fprintf(g_out, "%6d", r.labels[j]);
    fprintf(g_out, "\n");
    for (int i = 0; i < n; ++i) {
        fprintf(g_out, "%6d", r.labels[i]);
        for (int j = 0; j < n; ++j) fprintf(g_out, "%6d", r.access[size_t(i) * n + j]);
        fprintf(g_out, "\n");
    }
    fprintf(g_out,
            "What the tables measure (rows: source GPU, columns: destination GPU):\n"
            "  bandwidth: %d back-to-back copies of %zu bytes after %d warm-up, 1 GB/s = 1e9 bytes/s;\n"
            "    the diagonal is a copy within one GPU. Bidirectional: both directions at once,\n"
            "    one stream on each GPU, the sum of both directions.\n"
            "  P2P=Disabled: peer access off, cudaMemcpyPeerAsync staged through host memory.\n"
            "  P2P Writes runs the copy on the source GPU, P2P Reads on the destination GPU;\n"
            "    copy engine = %s (DMA), SM copy = a kernel with 16-byte loads/stores.\n"
            "  latency GPU rows: %zu-byte copies, %d back to back between two CUDA events with the\n"
            "    stream held until all are queued (median of batches); SM kernel: one-way latency\n"
            "    of a ping-pong between one thread on each GPU (round trip / 2).\n"
            "  latency CPU rows: host wall clock to issue one %zu-byte copy (or copy kernel) and\n"
            "    wait for it (median of %d).\n",
            o.reps, o.size, o.warmup, o.ce_uva ? "cudaMemcpyAsync with cudaMemcpyDefault (UVA)" : "cudaMemcpyPeerAsync",
            o.latency_size, o.latency_batch, o.latency_size, o.latency_reps);
    fflush(g_out);
}

void print_link_share(const Results& r, const Options& o) {
    const int n = r.n();
    if (n < 2) return;
    if (o.link_peak <= 0) {
        fprintf(g_out, "Link peak unknown: pass --link-peak GBPS (raw rate per direction, e.g. NV18 = 18 x 26.56 = "
                       "478.08) to see the share of the raw rate.\n");
        return;
    }
    fprintf(g_out, "Share of the raw link rate (--link-peak %.2f GB/s per direction, %.2f both ways):\n",
            o.link_peak, 2 * o.link_peak);
    for (const Table& t : r.tables) {
        const bool uni = t.key == "uni_p2p_on", bi = t.key == "bi_p2p_on";
        if (!uni && !bi) continue;
        double best = -1, worst = 1e300;
        int bi_ = 0, bj = 0, wi = 0, wj = 0;
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < n; ++j) {
                const double x = t.v[size_t(i) * n + j];
                if (i == j || !std::isfinite(x)) continue;
                if (x > best) { best = x; bi_ = i; bj = j; }
                if (x < worst) { worst = x; wi = i; wj = j; }
            }
        if (best < 0) continue;
        const double peak = uni ? o.link_peak : 2 * o.link_peak;
        fprintf(g_out, "  %-14s %-11s %-10s best %8.2f GB/s (%d->%d) = %5.1f%%, worst %8.2f GB/s (%d->%d) = %5.1f%%\n",
                uni ? "unidirectional" : "bidirectional", t.method == "sm" ? "SM copy" : "copy engine",
                t.direction == "read" ? "P2P reads" : "P2P writes", best, r.labels[bi_], r.labels[bj],
                100 * best / peak, worst, r.labels[wi], r.labels[wj], 100 * worst / peak);
    }
    fprintf(g_out,
            "Why below 100%%: the raw rate counts every bit on the wire. NVLink (like PCIe) carries data in\n"
            "  packets with headers, CRC and flow-control credits, so the payload rate tops out around 80-90%%\n"
            "  of raw; the copy engines or SMs and the memory on both sides take a little more.\n");
}

// ---------------------------------------------------------------------------- JSON
std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') { out += '\\'; out += c; }
        else if (static_cast<unsigned char>(c) < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); out += b; }
        else out += c;
    }
    return out + "\"";
}

std::string json_matrix(const Results& r, const std::vector<double>& v) {
    const int n = r.n();
    std::string s = "[";
    for (int i = 0; i < n; ++i) {
        s += i ? ", [" : "[";
        for (int j = 0; j < n; ++j) {
            const double x = v[size_t(i) * n + j];
            char b[32];
            if (std::isfinite(x)) snprintf(b, sizeof b, "%.6g", x);
            else snprintf(b, sizeof b, "null");
            s += (j ? ", " : "") + std::string(b);
        }
        s += "]";
    }
    return s + "]";
}

std::string variant_key(const Table& t) {
    if (t.key.find("p2p_off") != std::string::npos) return t.key;
    return t.key + ":" + t.method + ":" + t.direction;
}

void write_json(const Results& r, const Options& o, bool demo) {
    const int n = r.n();
    std::string s = "{\n";
    s += "  \"format\": \"ddlab-p2p/1\",\n  \"source\": \"ddlab\",\n";
    s += std::string("  \"synthetic\": ") + (demo ? "true" : "false") + ",\n";
    s += "  \"n\": " + std::to_string(n) + ",\n  \"labels\": [";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(r.labels[i]);
    s += "],\n  \"versions\": {\"cuda_driver\": " + json_string(version_string(r.driver)) +
         ", \"cuda_runtime\": " + json_string(version_string(r.runtime)) + "},\n";
    char buf[1024];
    snprintf(buf, sizeof buf,
             "  \"parameters\": {\"copy\": \"%s\", \"direction\": \"%s\", \"size_bytes\": %zu, \"reps\": %d, "
             "\"warmup\": %d, \"latency_size_bytes\": %zu, \"latency_reps\": %d, \"latency_batch\": %d, "
             "\"ce_api\": \"%s\", \"validate\": %s, \"link_peak_gbps\": %s},\n",
             o.copy_name.c_str(), o.direction_name.c_str(), o.size, o.reps, o.warmup, o.latency_size,
             o.latency_reps, o.latency_batch, o.ce_api_name.c_str(), o.validate ? "true" : "false",
             o.link_peak > 0 ? std::to_string(o.link_peak).c_str() : "null");
    s += buf;
    s += "  \"devices\": [";
    for (int i = 0; i < n; ++i) {
        snprintf(buf, sizeof buf,
                 "%s\n    {\"index\": %d, \"name\": %s, \"pci_bus_id\": %s, \"compute_capability\": \"%d.%d\", "
                 "\"memory_mib\": %zu, \"sm_count\": %d}",
                 i ? "," : "", r.labels[i], json_string(r.names[i]).c_str(), json_string(r.bus_ids[i]).c_str(),
                 r.cc_major[i], r.cc_minor[i], r.memory[i] >> 20, r.sm_count[i]);
        s += buf;
    }
    s += "\n  ],\n  \"connectivity\": [";
    for (int i = 0; i < n; ++i) {
        s += i ? ", [" : "[";
        for (int j = 0; j < n; ++j) s += std::string(j ? ", " : "") + (r.access[size_t(i) * n + j] ? "true" : "false");
        s += "]";
    }
    s += "],\n  \"variants\": {";
    bool first = true;
    for (const Table& t : r.tables) {
        s += std::string(first ? "\n" : ",\n") + "    " + json_string(variant_key(t)) + ": " + json_matrix(r, t.v);
        first = false;
    }
    s += "\n  },\n  \"notes\": [";
    for (size_t i = 0; i < r.notes.size(); ++i) s += (i ? ", " : "") + json_string(r.notes[i]);
    s += "],\n  \"validation\": ";
    s += o.validate ? json_string("passed (" + std::to_string(r.validated_copies) + " transfers checked)")
                    : std::string("null");
    s += "\n}\n";
    FILE* f = o.json == "-" ? stdout : fopen(o.json.c_str(), "w");
    if (!f) {
        fprintf(stderr, "p2p_bandwidth_latency: cannot write %s: %s\n", o.json.c_str(), strerror(errno));
        exit(kExitCuda);
    }
    fputs(s.c_str(), f);
    if (f != stdout) fclose(f);
    else fflush(f);
}

// ---------------------------------------------------------------------------- the measuring machine
struct Gpu {
    int dev = 0;
    int sms = 0;
    cudaStream_t s[2] = {nullptr, nullptr};
    uint32_t* src = nullptr;  // --size bytes, holds the pattern
    uint32_t* dst = nullptr;  // --size bytes, receives copies
    int* flag = nullptr;      // ping-pong word
    CheckResult* check = nullptr;
};

struct Transfer {
    int exec = 0;       // index (into gpus) of the GPU whose stream runs it
    int stream = 0;     // which of that GPU's streams
    int from = 0, to = 0;
    size_t offset = 0;  // bytes from the start of both buffers
    size_t bytes = 0;
    bool sm = false;
    uint32_t seed = 0;
};

class Bench {
  public:
    Bench(const Options& o, Results& r) : o_(o), r_(r) {}

    void setup(const std::vector<int>& devs) {
        const int n = int(devs.size());
        gpus_.resize(n);
        for (int i = 0; i < n; ++i) {
            Gpu& g = gpus_[i];
            g.dev = devs[i];
            CK(cudaSetDevice(g.dev));
            CK(cudaDeviceGetAttribute(&g.sms, cudaDevAttrMultiProcessorCount, g.dev));
            size_t free_b = 0, total_b = 0;
            CK(cudaMemGetInfo(&free_b, &total_b));
            const size_t need = 2 * o_.size + (64u << 20);
            if (free_b < need) {
                fprintf(stderr,
                        "p2p_bandwidth_latency: GPU %d has %.2f GiB free but the test needs 2 x --size = %.2f GiB "
                        "(+64 MiB); use a smaller --size\n",
                        g.dev, free_b / 1073741824.0, 2.0 * o_.size / 1073741824.0);
                exit(kExitCuda);
            }
            for (auto& st : g.s) CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
            CK(cudaMalloc(&g.src, o_.size));
            CK(cudaMalloc(&g.dst, o_.size));
            CK(cudaMalloc(&g.flag, 256));
            CK(cudaMalloc(&g.check, sizeof(CheckResult)));
        }
        // Host-mapped words shared with the GPUs: the hold flag and kernel status words.
        CK(cudaHostAlloc(reinterpret_cast<void**>(&host_words_), 64 * sizeof(int),
                         cudaHostAllocMapped | cudaHostAllocPortable));
        memset(host_words_, 0, 64 * sizeof(int));
        disable_all_peers();
    }

    // --------------------------------------------------------------- peer access
    void set_peer(int i, int j, bool on) {
        if (i == j || !r_.access[size_t(i) * r_.n() + j]) return;
        CK(cudaSetDevice(gpus_[i].dev));
        const cudaError_t e = on ? cudaDeviceEnablePeerAccess(gpus_[j].dev, 0) : cudaDeviceDisablePeerAccess(gpus_[j].dev);
        // Enabling twice or disabling what is off is harmless: the state is what we want.
        if (e == cudaErrorPeerAccessAlreadyEnabled || e == cudaErrorPeerAccessNotEnabled) {
            (void)cudaGetLastError();
            return;
        }
        check(e, on ? "cudaDeviceEnablePeerAccess" : "cudaDeviceDisablePeerAccess", __FILE__, __LINE__);
    }
    void set_pair(int i, int j, bool on) {
        set_peer(i, j, on);
        set_peer(j, i, on);
    }
    void disable_all_peers() {
        for (int i = 0; i < int(gpus_.size()); ++i)
            for (int j = 0; j < int(gpus_.size()); ++j) set_peer(i, j, false);
    }
    bool peer_ok(int i, int j) const { return i == j || r_.access[size_t(i) * r_.n() + j]; }

    // --------------------------------------------------------------- data and validation
    static uint32_t seed_for(int from, int to, int test) { return uint32_t((test * 1021 + from) * 1031 + to); }

    void fill(int gi, uint32_t* p, size_t offset_bytes, size_t bytes, uint32_t seed, bool poison) {
        CK(cudaSetDevice(gpus_[gi].dev));
        const size_t words = bytes / 4;
        const int blocks = std::max(1, std::min(gpus_[gi].sms * 8, int((words + 255) / 256)));
        fill_kernel<<<blocks, 256, 0, gpus_[gi].s[0]>>>(p + offset_bytes / 4, words, offset_bytes / 4, seed, poison ? 1 : 0);
        CK_LAUNCH("fill_kernel");
        CK(cudaStreamSynchronize(gpus_[gi].s[0]));
    }

    void prepare(const Transfer& t) {
        fill(t.from, gpus_[t.from].src, t.offset, t.bytes, t.seed, false);
        fill(t.to, gpus_[t.to].dst, t.offset, t.bytes, t.seed, true);
    }

    void validate(const Transfer& t, const std::string& what) {
        if (!o_.validate) return;
        Gpu& g = gpus_[t.to];
        CK(cudaSetDevice(g.dev));
        CK(cudaDeviceSynchronize());
        const size_t words = t.bytes / 4;
        const uint64_t first = t.offset / 4;
        if (o_.test_corrupt && !corrupted_ && (t.from != t.to || gpus_.size() == 1)) {
            // Deliberately wrong data in the first peer copy, to prove the check below catches it.
            const size_t k = words / 2;
            const uint32_t wrong = ~pattern_word(first + k, t.seed) ^ 0x5a5a5a5au;
            CK(cudaMemcpy(g.dst + first + k, &wrong, 4, cudaMemcpyHostToDevice));
            corrupted_ = true;
            fprintf(g_out, "--test-corrupt: overwrote destination word %zu of %s GPU %d -> GPU %d\n", k, what.c_str(),
                    gpus_[t.from].dev, g.dev);
        }
        CheckResult init{~0ull, 0ull};
        CK(cudaMemcpy(g.check, &init, sizeof init, cudaMemcpyHostToDevice));
        const int blocks = std::max(1, std::min(g.sms * 8, int((words + 255) / 256)));
        check_kernel<<<blocks, 256, 0, g.s[0]>>>(g.dst + first, words, first, t.seed, g.check);
        CK_LAUNCH("check_kernel");
        CheckResult res{};
        CK(cudaMemcpyAsync(&res, g.check, sizeof res, cudaMemcpyDeviceToHost, g.s[0]));
        CK(cudaStreamSynchronize(g.s[0]));
        if (res.bad_count != 0) {
            uint32_t got = 0;
            CK(cudaMemcpy(&got, g.dst + first + res.first_bad, 4, cudaMemcpyDeviceToHost));
            fflush(g_out);
            fprintf(stderr,
                    "VALIDATION FAILED: %s GPU %d -> GPU %d: first bad word %llu (byte offset %llu of the %zu-byte copy): "
                    "expected 0x%08x, got 0x%08x; %llu of %zu words wrong.\n"
                    "No figure is reported for a copy that fails validation.\n",
                    what.c_str(), gpus_[t.from].dev, g.dev, res.first_bad, res.first_bad * 4, t.bytes,
                    pattern_word(first + res.first_bad, t.seed), got, res.bad_count, words);
            exit(kExitValidation);
        }
        ++r_.validated_copies;
    }

    // --------------------------------------------------------------- copies
    void enqueue(const Transfer& t) {
        const size_t bytes = t.bytes;
        Gpu& g = gpus_[t.exec];
        CK(cudaSetDevice(g.dev));
        cudaStream_t s = g.s[t.stream];
        char* dst = reinterpret_cast<char*>(gpus_[t.to].dst) + t.offset;
        const char* src = reinterpret_cast<const char*>(gpus_[t.from].src) + t.offset;
        if (t.sm) {
            if (bytes < 4096) {
                copy_words_kernel<<<1, 32, 0, s>>>(reinterpret_cast<uint32_t*>(dst), reinterpret_cast<const uint32_t*>(src),
                                                   bytes / 4);
                CK_LAUNCH("copy_words_kernel");
            } else {
                const size_t n16 = bytes / 16;
                const int blocks = int(std::min<size_t>(size_t(g.sms) * 4, (n16 + kCopyThreads - 1) / kCopyThreads));
                copy_kernel<<<blocks, kCopyThreads, 0, s>>>(reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src), n16);
                CK_LAUNCH("copy_kernel");
            }
        } else if (t.from == t.to) {
            CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
        } else if (o_.ce_uva) {
            CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
        } else {
            CK(cudaMemcpyPeerAsync(dst, gpus_[t.to].dev, src, gpus_[t.from].dev, bytes, s));
        }
    }

    // Run `xfers` concurrently (each on its own stream), `reps` times back to back, between
    // one pair of events on the first transfer's GPU; returns total GB/s.
    double bandwidth(const std::vector<Transfer>& xfers, const std::string& what) {
        for (const Transfer& t : xfers) prepare(t);
        for (int w = 0; w < o_.warmup; ++w)
            for (const Transfer& t : xfers) enqueue(t);
        sync_all();
        Gpu& g0 = gpus_[xfers[0].exec];
        cudaStream_t s0 = g0.s[xfers[0].stream];
        CK(cudaSetDevice(g0.dev));
        cudaEvent_t start, stop;
        CK(cudaEventCreate(&start));
        CK(cudaEventCreate(&stop));
        CK(cudaEventRecord(start, s0));
        std::vector<cudaEvent_t> done(xfers.size(), nullptr);
        for (size_t k = 1; k < xfers.size(); ++k) {  // the other streams start when `start` fires
            const Gpu& g = gpus_[xfers[k].exec];
            CK(cudaSetDevice(g.dev));
            CK(cudaStreamWaitEvent(g.s[xfers[k].stream], start, 0));
        }
        for (int rep = 0; rep < o_.reps; ++rep)
            for (const Transfer& t : xfers) enqueue(t);
        for (size_t k = 1; k < xfers.size(); ++k) {  // `stop` waits for every stream
            const Gpu& g = gpus_[xfers[k].exec];
            CK(cudaSetDevice(g.dev));
            CK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
            CK(cudaEventRecord(done[k], g.s[xfers[k].stream]));
            CK(cudaSetDevice(g0.dev));
            CK(cudaStreamWaitEvent(s0, done[k], 0));
        }
        CK(cudaSetDevice(g0.dev));
        CK(cudaEventRecord(stop, s0));
        CK(cudaEventSynchronize(stop));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, start, stop));
        CK(cudaEventDestroy(start));
        CK(cudaEventDestroy(stop));
        for (size_t k = 1; k < xfers.size(); ++k) {
            CK(cudaSetDevice(gpus_[xfers[k].exec].dev));
            CK(cudaEventDestroy(done[k]));
        }
        sync_all();
        for (const Transfer& t : xfers) validate(t, what);
        double bytes = 0;
        for (const Transfer& t : xfers) bytes += double(t.bytes) * o_.reps;
        if (!(ms > 0)) {
            fprintf(stderr, "p2p_bandwidth_latency: %s: the timer read %.6f ms; increase --reps or --size\n", what.c_str(), ms);
            exit(kExitCuda);
        }
        return bytes / (ms * 1e-3) / 1e9;
    }

    // GPU-timed latency of tiny copies: median over batches of (batch time / batch size).
    double gpu_latency_copy(const Transfer& t, const std::string& what) {
        prepare(t);
        Gpu& g = gpus_[t.exec];
        cudaStream_t s = g.s[t.stream];
        volatile int* release = host_words_;
        volatile int* timed_out = host_words_ + 1;
        const int batches = std::max(3, o_.latency_reps / o_.latency_batch);
        std::vector<double> per_copy;
        bool hold = true;
        CK(cudaSetDevice(g.dev));
        cudaEvent_t start, stop;
        CK(cudaEventCreate(&start));
        CK(cudaEventCreate(&stop));
        for (int b = -1; b < batches; ++b) {  // batch -1 warms up
            CK(cudaSetDevice(g.dev));
            *release = 0;
            *timed_out = 0;
            if (hold) {
                hold_stream_kernel<<<1, 1, 0, s>>>(release, timed_out, kHoldTimeoutNs);
                CK_LAUNCH("hold_stream_kernel");
            }
            CK(cudaEventRecord(start, s));
            for (int k = 0; k < o_.latency_batch; ++k) enqueue(t);
            CK(cudaSetDevice(g.dev));
            CK(cudaEventRecord(stop, s));
            __atomic_store_n(const_cast<int*>(release), 1, __ATOMIC_SEQ_CST);
            CK(cudaEventSynchronize(stop));
            if (hold && *timed_out) {
                // The CPU could not queue the batch while the stream was held (the driver
                // waited on the GPU); measure this pair without holding and say so.
                hold = false;
                r_.notes.push_back(what + " GPU " + std::to_string(gpus_[t.from].dev) + " -> GPU " +
                                   std::to_string(gpus_[t.to].dev) + ": measured without holding the stream (the "
                                   "driver blocked while queueing), so it may include CPU queueing time");
                b = -2;  // start again, with a fresh warm-up batch
                per_copy.clear();
                continue;
            }
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, start, stop));
            if (b >= 0) per_copy.push_back(ms * 1000.0 / o_.latency_batch);
        }
        CK(cudaEventDestroy(start));
        CK(cudaEventDestroy(stop));
        validate(t, what);
        return median(per_copy);
    }

    // CPU-initiated latency: issue one tiny copy, wait for it; median wall time.
    double cpu_latency_copy(const Transfer& t, const std::string& what) {
        prepare(t);
        Gpu& g = gpus_[t.exec];
        cudaStream_t s = g.s[t.stream];
        std::vector<double> us;
        us.reserve(o_.latency_reps);
        for (int k = -10; k < o_.latency_reps; ++k) {  // 10 untimed tries warm up
            const auto t0 = std::chrono::steady_clock::now();
            enqueue(t);
            CK(cudaStreamSynchronize(s));
            const auto t1 = std::chrono::steady_clock::now();
            if (k >= 0) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        validate(t, what);
        return median(us);
    }

    // One-way SM latency from a ping-pong between GPUs i and j (i initiates).
    double pingpong(int i, int j, bool read_mode, const std::string& what) {
        const int rounds = std::max(100, o_.latency_reps);
        volatile int* status = host_words_ + 8;
        Gpu& a = gpus_[i];
        Gpu& b = gpus_[j];
        // write mode: store into the peer's word, poll your own; read mode: the reverse.
        volatile int* a_write = read_mode ? a.flag : b.flag;
        volatile int* a_poll = read_mode ? b.flag : a.flag;
        volatile int* b_write = read_mode ? b.flag : a.flag;
        volatile int* b_poll = read_mode ? a.flag : b.flag;
        std::vector<double> one_way;
        for (int trial = -1; trial < kPingPongTrials; ++trial) {
            for (Gpu* g : {&a, &b}) {
                CK(cudaSetDevice(g->dev));
                CK(cudaMemset(g->flag, 0, 256));
                CK(cudaDeviceSynchronize());
            }
            status[0] = status[1] = 0;
            CK(cudaSetDevice(b.dev));
            pingpong_kernel<<<1, 1, 0, b.s[1]>>>(b_write, b_poll, rounds, 0, kPingPongTimeoutNs, status + 1);
            CK_LAUNCH("pingpong_kernel (responder)");
            CK(cudaSetDevice(a.dev));
            cudaEvent_t start, stop;
            CK(cudaEventCreate(&start));
            CK(cudaEventCreate(&stop));
            CK(cudaEventRecord(start, a.s[1]));
            pingpong_kernel<<<1, 1, 0, a.s[1]>>>(a_write, a_poll, rounds, 1, kPingPongTimeoutNs, status);
            CK_LAUNCH("pingpong_kernel (initiator)");
            CK(cudaEventRecord(stop, a.s[1]));
            CK(cudaEventSynchronize(stop));
            CK(cudaSetDevice(b.dev));
            CK(cudaStreamSynchronize(b.s[1]));
            float ms = 0;
            CK(cudaSetDevice(a.dev));
            CK(cudaEventElapsedTime(&ms, start, stop));
            CK(cudaEventDestroy(start));
            CK(cudaEventDestroy(stop));
            // A ping-pong that did not finish measured nothing: always an error.
            if (status[0] != 2 || status[1] != 2) {
                fflush(g_out);
                fprintf(stderr,
                        "VALIDATION FAILED: %s ping-pong GPU %d <-> GPU %d did not complete %d round trips within %.0f s "
                        "(initiator status %d, responder status %d): peer stores are not arriving.\n",
                        what.c_str(), a.dev, b.dev, rounds, kPingPongTimeoutNs / 1e9, status[0], status[1]);
                exit(kExitValidation);
            }
            if (trial >= 0) one_way.push_back(ms * 1000.0 / (2.0 * rounds));
        }
        if (o_.validate) ++r_.validated_copies;
        return median(one_way);
    }

    void sync_all() {
        for (const Gpu& g : gpus_) {
            CK(cudaSetDevice(g.dev));
            CK(cudaDeviceSynchronize());
        }
    }

    static double median(std::vector<double> v) {
        if (v.empty()) return NAN;
        std::sort(v.begin(), v.end());
        const size_t m = v.size() / 2;
        return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
    }

  private:
    const Options& o_;
    Results& r_;
    std::vector<Gpu> gpus_;
    int* host_words_ = nullptr;
    bool corrupted_ = false;
};

// ---------------------------------------------------------------------------- the test plan
struct Variant {
    bool sm;
    bool read;
};

std::vector<Variant> variants(const Options& o) {
    std::vector<Variant> v;
    for (bool sm : {false, true}) {
        if ((sm && !o.sm) || (!sm && !o.ce)) continue;
        if (o.write) v.push_back({sm, false});
        if (o.read) v.push_back({sm, true});
    }
    return v;
}

std::string describe(const std::string& kind, bool on, const Variant& v) {
    std::string s = kind + (on ? " P2P=Enabled" : " P2P=Disabled");
    if (on) s += std::string(v.sm ? " SM copy" : " copy engine") + (v.read ? " reads" : " writes");
    return s;
}

Table new_table(const Results& r, const std::string& key, const std::string& method, const std::string& dir) {
    Table t;
    t.key = key;
    t.method = method;
    t.direction = dir;
    t.v.assign(size_t(r.n()) * r.n(), NAN);
    return t;
}

void run_bandwidth(Bench& bench, Results& r, const Options& o, bool bidirectional, bool on, const Variant& v) {
    const int n = r.n();
    const std::string kind = bidirectional ? "Bidirectional" : "Unidirectional";
    const std::string what = describe(kind, on, v);
    Table t = new_table(r, std::string(bidirectional ? "bi_" : "uni_") + (on ? "p2p_on" : "p2p_off"),
                        v.sm ? "sm" : "ce", on ? (v.read ? "read" : "write") : "");
    for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
            if (v.sm && !bench.peer_ok(i, j)) continue;  // a kernel cannot reach memory it cannot map
            bench.set_pair(i, j, on);
            std::vector<Transfer> xs;
            auto make = [&](int from, int to, int stream, size_t offset, size_t bytes, int test) {
                Transfer x;
                x.from = from;
                x.to = to;
                x.exec = v.read ? to : from;
                x.stream = stream;
                x.offset = offset;
                x.bytes = bytes;
                x.sm = v.sm;
                x.seed = Bench::seed_for(r.labels[from], r.labels[to], test);
                return x;
            };
            const int test = (bidirectional ? 10 : 0) + (on ? 1 : 0) + (v.sm ? 2 : 0) + (v.read ? 4 : 0);
            if (!bidirectional) {
                xs.push_back(make(i, j, 0, 0, o.size, test));
            } else if (i != j) {
                xs.push_back(make(i, j, 0, 0, o.size, test));
                xs.push_back(make(j, i, 0, 0, o.size, test));
            } else {
                // One GPU "both ways": two concurrent local copies of the two halves.
                const size_t half = (o.size / 32) * 16;
                xs.push_back(make(i, i, 0, 0, half, test));
                xs.push_back(make(i, i, 1, half, o.size - half, test));
            }
            t.v[size_t(i) * n + j] = bench.bandwidth(xs, what);
            bench.set_pair(i, j, false);
        }
    }
    r.tables.push_back(t);
    print_bandwidth_table(r, r.tables.back());
}

void run_latency(Bench& bench, Results& r, const Options& o, bool on, const Variant& v) {
    const int n = r.n();
    const std::string what = describe("latency", on, v);
    const std::string dir = on ? (v.read ? "read" : "write") : "";
    Table g = new_table(r, on ? "lat_gpu_p2p_on" : "lat_gpu_p2p_off", v.sm ? "sm" : "ce", dir);
    Table c = new_table(r, on ? "lat_cpu_p2p_on" : "lat_cpu_p2p_off", v.sm ? "sm" : "ce", dir);
    for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
            if (v.sm && !bench.peer_ok(i, j)) continue;
            bench.set_pair(i, j, on);
            Transfer x;
            x.from = i;
            x.to = j;
            x.exec = v.read ? j : i;
            x.bytes = o.latency_size;
            x.sm = v.sm;
            x.seed = Bench::seed_for(r.labels[i], r.labels[j], 20 + (on ? 1 : 0) + (v.sm ? 2 : 0) + (v.read ? 4 : 0));
            if (v.sm) {
                // A GPU cannot ping-pong with itself: the diagonal stays n/a.
                if (i != j) g.v[size_t(i) * n + j] = bench.pingpong(i, j, v.read, what);
            } else {
                g.v[size_t(i) * n + j] = bench.gpu_latency_copy(x, what + " (GPU-timed)");
            }
            c.v[size_t(i) * n + j] = bench.cpu_latency_copy(x, what + " (CPU-initiated)");
            bench.set_pair(i, j, false);
        }
    }
    r.tables.push_back(g);
    r.tables.push_back(c);
    print_latency_tables(r, r.tables[r.tables.size() - 2], r.tables.back());
}

// Synthetic output for --format-demo: the same printers and JSON writer, made-up numbers,
// no GPU touched. Parser tests use it to check that parser and printer agree.
void format_demo(const Options& o, Results& r) {
    const int n = o.format_demo;
    r.driver = 13000;
    r.runtime = 13000;
    for (int i = 0; i < n; ++i) {
        r.labels.push_back(i);
        r.names.push_back("SYNTHETIC GPU " + std::to_string(i));
        char bus[32];
        snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x18 + 0x10 * i);
        r.bus_ids.push_back(bus);
        r.pci_bus.push_back(0x18 + 0x10 * i);
        r.pci_device.push_back(0);
        r.pci_domain.push_back(0);
        r.cc_major.push_back(9);
        r.cc_minor.push_back(0);
        r.memory.push_back(size_t(80) << 30);
        r.sm_count.push_back(132);
    }
    r.access.assign(size_t(n) * n, 1);
    if (n >= 3) r.access[size_t(0) * n + (n - 1)] = r.access[size_t(n - 1) * n + 0] = 0;
    print_preamble(r, o, true);
    auto fill = [&](Table& t, double base) {
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < n; ++j) t.v[size_t(i) * n + j] = base + 10.0 * i + j + (i == j ? 1000.0 : 0.0);
    };
    const std::vector<Variant> vs = variants(o);
    for (bool bi : {false, true}) {
        Table off = new_table(r, bi ? "bi_p2p_off" : "uni_p2p_off", "ce", "");
        fill(off, bi ? 50 : 30);
        r.tables.push_back(off);
        print_bandwidth_table(r, r.tables.back());
        for (const Variant& v : vs) {
            Table t = new_table(r, bi ? "bi_p2p_on" : "uni_p2p_on", v.sm ? "sm" : "ce", v.read ? "read" : "write");
            fill(t, (bi ? 700 : 350) + (v.sm ? -20 : 0) + (v.read ? 5 : 0));
            r.tables.push_back(t);
            print_bandwidth_table(r, r.tables.back());
        }
    }
    Table g = new_table(r, "lat_gpu_p2p_off", "ce", ""), c = new_table(r, "lat_cpu_p2p_off", "ce", "");
    fill(g, 15);
    fill(c, 20);
    r.tables.push_back(g);
    r.tables.push_back(c);
    print_latency_tables(r, g, c);
    for (const Variant& v : vs) {
        const std::string dir = v.read ? "read" : "write";
        Table gg = new_table(r, "lat_gpu_p2p_on", v.sm ? "sm" : "ce", dir);
        Table cc = new_table(r, "lat_cpu_p2p_on", v.sm ? "sm" : "ce", dir);
        fill(gg, 2);
        fill(cc, 8);
        if (v.sm)
            for (int i = 0; i < n; ++i) gg.v[size_t(i) * n + i] = NAN;
        r.tables.push_back(gg);
        r.tables.push_back(cc);
        print_latency_tables(r, gg, cc);
    }
    print_link_share(r, o);
    fprintf(g_out, "Validation: not run (format demo)\n");
    r.notes.push_back("format demo: synthetic numbers, not a measurement");
    if (!o.json.empty()) {
        Options oo = o;
        oo.validate = false;
        write_json(r, oo, true);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_options(argc, argv);
    if (o.json == "-") g_out = stderr;
    Results r;
    if (o.format_demo) {
        format_demo(o, r);
        return 0;
    }

    // Load every kernel when CUDA starts, not at its first launch: a lazily loaded kernel
    // can wait for work already running in its context, and the hold and ping-pong kernels
    // spin until something else happens. (Read by CUDA at initialisation, i.e. just below.)
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorInsufficientDriver) {
        int runtime = 0;
        cudaRuntimeGetVersion(&runtime);
        fprintf(stderr,
                "p2p_bandwidth_latency: no CUDA GPU is usable: the NVIDIA driver is missing or older than the CUDA "
                "%s runtime this program was built with; install a newer driver (nvidia-smi shows the CUDA version "
                "it supports) or build with an older CUDA toolkit.\n",
                version_string(runtime).c_str());
        return kExitUsage;
    }
    if (e != cudaSuccess || count == 0) {
        fprintf(stderr,
                "p2p_bandwidth_latency: no CUDA GPU is visible (%s). This test needs an NVIDIA GPU and driver; "
                "check nvidia-smi and CUDA_VISIBLE_DEVICES.\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
        return kExitUsage;
    }
    std::vector<int> devs = o.gpus;
    if (devs.empty())
        for (int d = 0; d < count; ++d) devs.push_back(d);
    for (int d : devs)
        if (d >= count) usage_error("--gpus names GPU " + std::to_string(d) + " but only " + std::to_string(count) + " are visible");

    CK(cudaDriverGetVersion(&r.driver));
    CK(cudaRuntimeGetVersion(&r.runtime));
    const int n = int(devs.size());
    for (int d : devs) {
        cudaDeviceProp p;
        CK(cudaGetDeviceProperties(&p, d));
        char bus[64] = {0};
        CK(cudaDeviceGetPCIBusId(bus, sizeof bus, d));
        r.labels.push_back(d);
        r.names.push_back(p.name);
        r.bus_ids.push_back(bus);
        r.pci_bus.push_back(p.pciBusID);
        r.pci_device.push_back(p.pciDeviceID);
        r.pci_domain.push_back(p.pciDomainID);
        r.cc_major.push_back(p.major);
        r.cc_minor.push_back(p.minor);
        r.memory.push_back(p.totalGlobalMem);
        r.sm_count.push_back(p.multiProcessorCount);
    }
    r.access.assign(size_t(n) * n, 1);
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
            if (i != j) CK(cudaDeviceCanAccessPeer(&r.access[size_t(i) * n + j], devs[i], devs[j]));
    print_preamble(r, o, false);
    if (n == 1)
        fprintf(g_out, "Only one GPU is in the test: the tables hold copies within GPU %d; peer-to-peer needs two GPUs.\n",
                devs[0]);
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
            if (i != j && !r.access[size_t(i) * n + j])
                r.notes.push_back("GPU " + std::to_string(devs[i]) + " cannot access GPU " + std::to_string(devs[j]) +
                                  " as a peer: its P2P=Enabled copy-engine figures are host-staged, SM figures n/a");

    const auto t_start = std::chrono::steady_clock::now();
    Bench bench(o, r);
    bench.setup(devs);
    const std::vector<Variant> vs = variants(o);
    const Variant ce_write{false, false};
    for (bool bi : {false, true}) {
        run_bandwidth(bench, r, o, bi, false, ce_write);
        for (const Variant& v : vs) run_bandwidth(bench, r, o, bi, true, v);
    }
    run_latency(bench, r, o, false, ce_write);
    for (const Variant& v : vs) run_latency(bench, r, o, true, v);
    bench.sync_all();

    print_link_share(r, o);
    for (const std::string& note : r.notes) fprintf(g_out, "Note: %s\n", note.c_str());
    if (o.validate)
        fprintf(g_out, "Validation: PASSED (%lld transfers checked word by word)\n", r.validated_copies);
    else
        fprintf(g_out, "Validation: OFF (--no-validate): the figures above are unchecked\n");
    fprintf(g_out, "Time taken: %.1f s\n",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
    fflush(g_out);
    if (!o.json.empty()) write_json(r, o, false);
    return 0;
}
