// host_bandwidth_latency.cu -- the course's host <-> GPU bandwidth and latency test.
//
// Written for the course "Distributed Deep Learning: GPU System Topology" from the CUDA
// Runtime API documentation and the Linux set_mempolicy(2) and sched_setaffinity(2) manual
// pages. Every byte a training step feeds to a GPU crosses its host link first (PCIe to the
// CPU, or NVLink-C2C on Grace machines); this test measures that link the way NVIDIA's
// nvbandwidth measures host_to_device_memcpy_ce / device_to_host_memcpy_ce:
//
//   * bandwidth: `reps` back-to-back cudaMemcpyAsync copies of one size between one pair
//     of CUDA events on one stream, after one untimed warm-up copy (copy engine);
//     GB/s = 1e9 bytes/s. "bidir": a host-to-device and a device-to-host stream started
//     together; the figure counts the bytes of both directions.
//   * pinned host memory (cudaHostAlloc) and pageable memory (malloc; the driver stages
//     it through its own pinned buffers, which is what an unpinned input pipeline pays).
//   * per NUMA node of the host: the timing thread is bound to the node's CPUs
//     (sched_setaffinity) and the host buffers are allocated under set_mempolicy(MPOL_BIND)
//     for that node, then touched, so their pages live there. The GPU's own node (from
//     sysfs) is marked. Without NUMA in the kernel: one node, said so.
//   * latency: one copy of --latency-size bytes (4 KiB by default) between two events,
//     median over --latency-reps copies, per direction and memory kind.
//
// Every copy that yields a number at the largest size is validated (a pattern that
// depends on the word index; the destination poisoned first, compared word by word).
// Output: tables on stdout (stderr with --json -), and with --json PATH one JSON object
// ("format": "ddlab-hostlink/1"), read by ddlab.measure.host_link.
//
// Exit codes: 0 success, 1 CUDA or runtime failure, 2 no GPU visible or bad options,
// 3 validation failed.

#include <cuda_runtime.h>

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kExitCuda = 1;
constexpr int kExitUsage = 2;
constexpr int kExitValidation = 3;
constexpr int kMpolDefault = 0;   // <linux/mempolicy.h>, without needing libnuma's headers
constexpr int kMpolBind = 2;

FILE* g_out = stdout;

void check(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) {
        fflush(g_out);
        fprintf(stderr, "CUDA error at %s:%d: %s failed: %s (%s)\n", file, line, what,
                cudaGetErrorName(err), cudaGetErrorString(err));
        exit(kExitCuda);
    }
}
#define CK(call) check((call), #call, __FILE__, __LINE__)

[[noreturn]] void usage_error(const std::string& msg) {
    fprintf(stderr, "host_bandwidth_latency: %s (see --help)\n", msg.c_str());
    exit(kExitUsage);
}

// ---------------------------------------------------------------------------- data pattern
__host__ __device__ inline uint32_t pattern_word(uint64_t index, uint32_t seed) {
    uint64_t z = index * 0x9E3779B97F4A7C15ull + (uint64_t(seed) + 1) * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return uint32_t(z >> 32);
}

__global__ void fill_kernel(uint32_t* p, size_t n, uint32_t seed, int invert) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint32_t v = pattern_word(i, seed);
        p[i] = invert ? ~v : v;
    }
}

__global__ void count_bad_kernel(const uint32_t* p, size_t n, uint32_t seed, unsigned long long* bad) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        if (p[i] != pattern_word(i, seed)) atomicAdd(bad, 1ull);
}

void host_fill(uint32_t* p, size_t n, uint32_t seed, bool invert) {
    for (size_t i = 0; i < n; ++i) p[i] = invert ? ~pattern_word(i, seed) : pattern_word(i, seed);
}

size_t host_count_bad(const uint32_t* p, size_t n, uint32_t seed) {
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += p[i] != pattern_word(i, seed);
    return bad;
}

// ---------------------------------------------------------------------------- NUMA
std::string read_line(const std::string& path) {
    FILE* f = fopen(path.c_str(), "r");
    if (!f) return "";
    char buf[4096] = {0};
    const char* ok = fgets(buf, sizeof buf, f);
    fclose(f);
    std::string s = ok ? buf : "";
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

std::vector<int> numa_nodes() {
    std::vector<int> nodes;
    DIR* d = opendir("/sys/devices/system/node");
    if (!d) return nodes;
    while (dirent* e = readdir(d)) {
        int n = -1;
        if (sscanf(e->d_name, "node%d", &n) == 1 && n >= 0) nodes.push_back(n);
    }
    closedir(d);
    std::sort(nodes.begin(), nodes.end());
    return nodes;
}

// "0-3,8-11" -> {0,1,2,3,8,9,10,11}
std::vector<int> parse_cpulist(const std::string& s) {
    std::vector<int> cpus;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        const std::string part = s.substr(i, j - i);
        int a = -1, b = -1;
        if (sscanf(part.c_str(), "%d-%d", &a, &b) == 2) {
            for (int c = a; c <= b; ++c) cpus.push_back(c);
        } else if (sscanf(part.c_str(), "%d", &a) == 1) {
            cpus.push_back(a);
        }
        i = j + 1;
    }
    return cpus;
}

// The GPU's NUMA node as sysfs reports it; -1 when none is reported (e.g. many VMs).
int gpu_numa_node(const char* bus_id) {
    std::string bus = bus_id;
    for (char& c : bus) c = char(tolower(c));
    // cudaDeviceGetPCIBusId gives "0000:19:00.0"; sysfs names the device the same way.
    const std::string v = read_line("/sys/bus/pci/devices/" + bus + "/numa_node");
    return v.empty() ? -1 : atoi(v.c_str());
}

struct Binding {
    bool cpus = false;     // the thread runs on the node's CPUs
    bool memory = false;   // host allocations are bound to the node
};

// Bind this thread (CPUs and memory policy) to `node`; what could be bound is returned.
Binding bind_to_node(int node) {
    Binding b;
    const std::vector<int> cpus = parse_cpulist(read_line("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist"));
    if (!cpus.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c : cpus)
            if (c < CPU_SETSIZE) CPU_SET(c, &set);
        b.cpus = sched_setaffinity(0, sizeof set, &set) == 0;
    }
    unsigned long mask[16] = {0};
    if (node < int(sizeof mask * 8)) {
        mask[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
        b.memory = syscall(SYS_set_mempolicy, kMpolBind, mask, sizeof mask * 8) == 0;
    }
    return b;
}

void unbind_memory() { syscall(SYS_set_mempolicy, kMpolDefault, nullptr, 0); }

// ---------------------------------------------------------------------------- options
struct Options {
    int device = 0;
    std::vector<size_t> sizes;
    std::vector<int> nodes;          // empty: every node
    bool numa = true;
    size_t latency_size = 4096;
    int latency_reps = 200;
    double seconds_per_row = 0.25;   // aim for about this much timed copying per row
    std::string json;
};

size_t parse_size(const std::string& s) {
    char* end = nullptr;
    const double v = strtod(s.c_str(), &end);
    if (end == s.c_str() || v <= 0) usage_error("bad size '" + s + "'");
    std::string u = end;
    for (char& c : u) c = char(toupper(c));
    double m = 1;
    if (u == "K" || u == "KIB") m = 1024.0;
    else if (u == "M" || u == "MIB") m = 1024.0 * 1024;
    else if (u == "G" || u == "GIB") m = 1024.0 * 1024 * 1024;
    else if (!u.empty() && u != "B") usage_error("bad size unit in '" + s + "' (use K, M or G: binary units)");
    const double bytes = v * m;
    if (bytes < 4 || bytes > 64.0 * 1024 * 1024 * 1024) usage_error("size '" + s + "' out of range (4 B to 64 GiB)");
    return (size_t(bytes) + 3) / 4 * 4;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(sep, i);
        if (j == std::string::npos) j = s.size();
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j + 1;
    }
    return out;
}

void print_help() {
    printf(
        "host_bandwidth_latency: host <-> GPU copy-engine bandwidth and latency, pinned and pageable, per NUMA node\n\n"
        "  --device N          the CUDA device (index after CUDA_VISIBLE_DEVICES; default 0)\n"
        "  --sizes LIST        comma-separated sizes, e.g. 4K,1M,1G (default 4K..1G in powers of 4)\n"
        "  --numa all|none|N,M nodes to measure from (default all; none: no binding)\n"
        "  --latency-size S    latency copy size (default 4K)\n"
        "  --latency-reps N    copies timed for the latency median (default 200)\n"
        "  --seconds S         timed copying aimed for per bandwidth row (default 0.25)\n"
        "  --json PATH|-       also write the results as JSON (- : stdout; tables then go to stderr)\n");
}

Options parse_options(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage_error(a + " needs a value");
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            print_help();
            exit(0);
        } else if (a == "--device") {
            o.device = atoi(value().c_str());
        } else if (a == "--sizes") {
            for (const std::string& s : split(value(), ',')) o.sizes.push_back(parse_size(s));
        } else if (a == "--numa") {
            const std::string v = value();
            if (v == "none") o.numa = false;
            else if (v != "all")
                for (const std::string& s : split(v, ',')) o.nodes.push_back(atoi(s.c_str()));
        } else if (a == "--latency-size") {
            o.latency_size = parse_size(value());
        } else if (a == "--latency-reps") {
            o.latency_reps = std::max(3, atoi(value().c_str()));
        } else if (a == "--seconds") {
            o.seconds_per_row = atof(value().c_str());
            if (!(o.seconds_per_row > 0)) usage_error("--seconds must be positive");
        } else if (a == "--json") {
            o.json = value();
        } else {
            usage_error("unknown option '" + a + "'");
        }
    }
    if (o.sizes.empty())
        for (size_t s = 4096; s <= (size_t(1) << 30); s *= 4) o.sizes.push_back(s);
    std::sort(o.sizes.begin(), o.sizes.end());
    return o;
}

// ---------------------------------------------------------------------------- measuring
struct Row {
    int node;
    bool gpu_node;
    const char* memory;
    const char* direction;
    size_t bytes;
    int reps;
    double seconds;
    double gbps;
};

struct Latency {
    int node;
    const char* memory;
    const char* direction;
    size_t bytes;
    int reps;
    double us_median;
};

struct Skip {
    int node;
    size_t bytes;
    const char* memory;
    std::string why;
};

struct HostBuffers {
    void* a = nullptr;   // source of host-to-device copies
    void* b = nullptr;   // destination of device-to-host copies
    bool pinned = false;
    size_t bytes = 0;
    ~HostBuffers() { release(); }
    void release() {
        if (pinned) {
            if (a) cudaFreeHost(a);
            if (b) cudaFreeHost(b);
        } else {
            free(a);
            free(b);
        }
        a = b = nullptr;
    }
    // false when the host has no memory for them (the caller skips that size)
    bool allocate(size_t n, bool pin) {
        release();
        pinned = pin;
        bytes = n;
        if (pin) {
            if (cudaHostAlloc(&a, n, cudaHostAllocDefault) != cudaSuccess ||
                cudaHostAlloc(&b, n, cudaHostAllocDefault) != cudaSuccess) {
                cudaGetLastError();
                release();
                return false;
            }
        } else {
            a = malloc(n);
            b = malloc(n);
            if (!a || !b) {
                release();
                return false;
            }
        }
        memset(a, 0, n);   // first touch: the pages land under the memory policy in force
        memset(b, 0, n);
        return true;
    }
};

int reps_for(size_t bytes, double seconds, double guess_gbps) {
    const double r = seconds * guess_gbps * 1e9 / double(bytes);
    return int(std::min(2000.0, std::max(5.0, r)));
}

float time_copies(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, int reps, cudaStream_t s,
                  cudaEvent_t t0, cudaEvent_t t1) {
    CK(cudaMemcpyAsync(dst, src, bytes, kind, s));   // warm-up
    CK(cudaStreamSynchronize(s));
    CK(cudaEventRecord(t0, s));
    for (int r = 0; r < reps; ++r) CK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    CK(cudaEventRecord(t1, s));
    CK(cudaEventSynchronize(t1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    return ms;
}

float time_bidir(void* dev_a, const void* host_a, void* host_b, const void* dev_b, size_t bytes, int reps,
                 cudaStream_t s1, cudaStream_t s2, cudaEvent_t t0, cudaEvent_t t1, cudaEvent_t mid) {
    CK(cudaMemcpyAsync(dev_a, host_a, bytes, cudaMemcpyHostToDevice, s1));
    CK(cudaMemcpyAsync(host_b, dev_b, bytes, cudaMemcpyDeviceToHost, s2));
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(t0, s1));
    CK(cudaStreamWaitEvent(s2, t0, 0));
    for (int r = 0; r < reps; ++r) {
        CK(cudaMemcpyAsync(dev_a, host_a, bytes, cudaMemcpyHostToDevice, s1));
        CK(cudaMemcpyAsync(host_b, dev_b, bytes, cudaMemcpyDeviceToHost, s2));
    }
    CK(cudaEventRecord(mid, s2));
    CK(cudaStreamWaitEvent(s1, mid, 0));
    CK(cudaEventRecord(t1, s1));
    CK(cudaEventSynchronize(t1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    return ms;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double latency_us(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, int reps, cudaStream_t s,
                  cudaEvent_t t0, cudaEvent_t t1) {
    std::vector<double> us;
    CK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    CK(cudaStreamSynchronize(s));
    for (int r = 0; r < reps; ++r) {
        CK(cudaEventRecord(t0, s));
        CK(cudaMemcpyAsync(dst, src, bytes, kind, s));
        CK(cudaEventRecord(t1, s));
        CK(cudaEventSynchronize(t1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        us.push_back(1000.0 * ms);
    }
    return median(us);
}

// Validation at one size: host pattern -> device (checked on the GPU), device pattern -> host
// (checked on the CPU). Returns the number of bad words.
size_t validate(HostBuffers& h, void* dev, size_t bytes, cudaStream_t s, unsigned long long* bad_dev) {
    const size_t words = bytes / 4;
    size_t bad = 0;
    host_fill(static_cast<uint32_t*>(h.a), words, 11, false);
    fill_kernel<<<1024, 256, 0, s>>>(static_cast<uint32_t*>(dev), words, 11, 1);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(dev, h.a, bytes, cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(bad_dev, 0, sizeof *bad_dev, s));
    count_bad_kernel<<<1024, 256, 0, s>>>(static_cast<const uint32_t*>(dev), words, 11, bad_dev);
    CK(cudaGetLastError());
    unsigned long long b = 0;
    CK(cudaMemcpyAsync(&b, bad_dev, sizeof b, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    bad += b;
    fill_kernel<<<1024, 256, 0, s>>>(static_cast<uint32_t*>(dev), words, 23, 0);
    CK(cudaGetLastError());
    host_fill(static_cast<uint32_t*>(h.b), words, 23, true);
    CK(cudaMemcpyAsync(h.b, dev, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    bad += host_count_bad(static_cast<const uint32_t*>(h.b), words, 23);
    return bad;
}

std::string human(size_t b) {
    char buf[32];
    if (b >= (size_t(1) << 30)) snprintf(buf, sizeof buf, "%zu GiB", b >> 30);
    else if (b >= (size_t(1) << 20)) snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
    else if (b >= 1024) snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
    else snprintf(buf, sizeof buf, "%zu B", b);
    return buf;
}

std::string json_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        if (c == '\n') { o += "\\n"; continue; }
        o += c;
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_options(argc, argv);
    if (o.json == "-") g_out = stderr;

    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        fprintf(stderr, "host_bandwidth_latency: no CUDA GPU is visible (%s). This test needs an NVIDIA GPU and "
                        "driver; check nvidia-smi and CUDA_VISIBLE_DEVICES.\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
        return kExitUsage;
    }
    if (o.device < 0 || o.device >= count)
        usage_error("--device " + std::to_string(o.device) + " but " + std::to_string(count) + " GPU(s) are visible");
    CK(cudaSetDevice(o.device));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, o.device));
    char bus[64] = {0};
    CK(cudaDeviceGetPCIBusId(bus, sizeof bus, o.device));
    const int gpu_node = gpu_numa_node(bus);
    int driver = 0, runtime = 0;
    CK(cudaDriverGetVersion(&driver));
    CK(cudaRuntimeGetVersion(&runtime));

    const std::vector<int> host_nodes = numa_nodes();
    const bool numa_supported = !host_nodes.empty();
    std::vector<int> nodes;
    if (!o.numa || !numa_supported) nodes.push_back(numa_supported ? (gpu_node >= 0 ? gpu_node : host_nodes[0]) : 0);
    else if (o.nodes.empty()) nodes = host_nodes;
    else
        for (int n : o.nodes) {
            if (std::find(host_nodes.begin(), host_nodes.end(), n) == host_nodes.end())
                usage_error("--numa names node " + std::to_string(n) + ", which this host does not have");
            nodes.push_back(n);
        }

    const size_t max_bytes = std::max(o.sizes.back(), o.latency_size);
    void* dev_a = nullptr;
    void* dev_b = nullptr;
    unsigned long long* bad_dev = nullptr;
    CK(cudaMalloc(&dev_a, max_bytes));
    CK(cudaMalloc(&dev_b, max_bytes));
    CK(cudaMalloc(&bad_dev, sizeof *bad_dev));
    cudaStream_t s1, s2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t t0, t1, mid;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    CK(cudaEventCreate(&mid));

    std::vector<Row> rows;
    std::vector<Latency> lats;
    std::vector<Skip> skips;
    std::vector<std::string> notes;
    if (!numa_supported) notes.push_back("no NUMA information in this kernel (/sys/devices/system/node): one node measured, unbound");
    else if (!o.numa) notes.push_back("--numa none: the thread and host memory were not bound");
    if (gpu_node < 0 && numa_supported) notes.push_back("the GPU's NUMA node is not reported by sysfs (often a VM)");

    fprintf(g_out, "host <-> GPU %d (%s, %s), copy engine, CUDA events, GB/s = 1e9 bytes/s\n", o.device, prop.name, bus);
    int failures = 0;
    for (int node : nodes) {
        Binding b;
        if (numa_supported && o.numa) {
            b = bind_to_node(node);
            if (!b.cpus) notes.push_back("node " + std::to_string(node) + ": could not bind the thread to its CPUs");
            if (!b.memory) notes.push_back("node " + std::to_string(node) + ": set_mempolicy refused; host pages placed by first touch");
        }
        const bool is_gpu_node = node == gpu_node;
        for (int pin = 1; pin >= 0; --pin) {
            const char* mem = pin ? "pinned" : "pageable";
            HostBuffers h;
            // The largest size the host can give; smaller sizes use the start of the buffers.
            size_t have = 0;
            for (auto it = o.sizes.rbegin(); it != o.sizes.rend(); ++it) {
                if (h.allocate(std::max(*it, o.latency_size), pin != 0)) {
                    have = *it;
                    break;
                }
                skips.push_back({node, *it, mem, "out of host memory"});
            }
            if (numa_supported && o.numa) unbind_memory();
            if (!have) continue;
            const size_t bad = validate(h, dev_a, have, s1, bad_dev);
            if (bad) {
                fprintf(stderr, "host_bandwidth_latency: validation failed on node %d, %s memory, %s: %zu bad words\n",
                        node, mem, human(have).c_str(), bad);
                failures++;
                continue;
            }
            fprintf(g_out, "\nNUMA node %d%s, %s host memory\n%10s %12s %12s %12s\n", node,
                    is_gpu_node ? " (the GPU's node)" : "", mem, "size", "h2d GB/s", "d2h GB/s", "both GB/s");
            for (size_t bytes : o.sizes) {
                if (bytes > have) continue;
                const double guess = pin ? 50.0 : 10.0;
                const int reps = reps_for(bytes, o.seconds_per_row, guess);
                const float h2d = time_copies(dev_a, h.a, bytes, cudaMemcpyHostToDevice, reps, s1, t0, t1);
                const float d2h = time_copies(h.b, dev_b, bytes, cudaMemcpyDeviceToHost, reps, s1, t0, t1);
                const float bid = time_bidir(dev_a, h.a, h.b, dev_b, bytes, reps, s1, s2, t0, t1, mid);
                const double gb = double(bytes) * reps / 1e9;
                rows.push_back({node, is_gpu_node, mem, "h2d", bytes, reps, h2d / 1e3, gb / (h2d / 1e3)});
                rows.push_back({node, is_gpu_node, mem, "d2h", bytes, reps, d2h / 1e3, gb / (d2h / 1e3)});
                rows.push_back({node, is_gpu_node, mem, "bidir", bytes, reps, bid / 1e3, 2 * gb / (bid / 1e3)});
                fprintf(g_out, "%10s %12.2f %12.2f %12.2f\n", human(bytes).c_str(), gb / (h2d / 1e3), gb / (d2h / 1e3),
                        2 * gb / (bid / 1e3));
            }
            const double lh = latency_us(dev_a, h.a, o.latency_size, cudaMemcpyHostToDevice, o.latency_reps, s1, t0, t1);
            const double ld = latency_us(h.b, dev_b, o.latency_size, cudaMemcpyDeviceToHost, o.latency_reps, s1, t0, t1);
            lats.push_back({node, mem, "h2d", o.latency_size, o.latency_reps, lh});
            lats.push_back({node, mem, "d2h", o.latency_size, o.latency_reps, ld});
            fprintf(g_out, "latency of one %s copy (median of %d): h2d %.2f us, d2h %.2f us\n", human(o.latency_size).c_str(),
                    o.latency_reps, lh, ld);
        }
    }
    for (const std::string& n : notes) fprintf(g_out, "note: %s\n", n.c_str());
    for (const Skip& s : skips)
        fprintf(g_out, "skipped: node %d, %s, %s: %s\n", s.node, s.memory, human(s.bytes).c_str(), s.why.c_str());

    if (!o.json.empty()) {
        FILE* f = o.json == "-" ? stdout : fopen((o.json + ".part").c_str(), "w");
        if (!f) {
            fprintf(stderr, "host_bandwidth_latency: cannot write %s: %s\n", o.json.c_str(), strerror(errno));
            return kExitUsage;
        }
        fprintf(f, "{\"format\": \"ddlab-hostlink/1\",\n \"device\": {\"index\": %d, \"name\": \"%s\", \"pci_bus_id\": \"%s\", "
                   "\"numa_node\": %s, \"cuda_driver\": %d, \"cuda_runtime\": %d},\n",
                o.device, json_escape(prop.name).c_str(), bus, gpu_node >= 0 ? std::to_string(gpu_node).c_str() : "null",
                driver, runtime);
        fprintf(f, " \"method\": \"copy engine: cudaMemcpyAsync between host and device memory, timed with CUDA events\",\n");
        fprintf(f, " \"numa\": {\"supported\": %s, \"bound\": %s, \"nodes\": [", numa_supported ? "true" : "false",
                numa_supported && o.numa ? "true" : "false");
        for (size_t i = 0; i < host_nodes.size(); ++i) fprintf(f, "%s%d", i ? ", " : "", host_nodes[i]);
        fprintf(f, "], \"gpu_node\": %s},\n \"rows\": [", gpu_node >= 0 ? std::to_string(gpu_node).c_str() : "null");
        for (size_t i = 0; i < rows.size(); ++i) {
            const Row& r = rows[i];
            fprintf(f, "%s\n  {\"numa_node\": %d, \"gpu_node\": %s, \"memory\": \"%s\", \"direction\": \"%s\", \"bytes\": %zu, "
                       "\"reps\": %d, \"seconds\": %.9g, \"gbps\": %.6g}",
                    i ? "," : "", r.node, r.gpu_node ? "true" : "false", r.memory, r.direction, r.bytes, r.reps, r.seconds,
                    r.gbps);
        }
        fprintf(f, "],\n \"latency\": [");
        for (size_t i = 0; i < lats.size(); ++i) {
            const Latency& l = lats[i];
            fprintf(f, "%s\n  {\"numa_node\": %d, \"memory\": \"%s\", \"direction\": \"%s\", \"bytes\": %zu, "
                       "\"us_median\": %.6g, \"reps\": %d}",
                    i ? "," : "", l.node, l.memory, l.direction, l.bytes, l.us_median, l.reps);
        }
        fprintf(f, "],\n \"skipped\": [");
        for (size_t i = 0; i < skips.size(); ++i)
            fprintf(f, "%s\n  {\"numa_node\": %d, \"bytes\": %zu, \"memory\": \"%s\", \"why\": \"%s\"}", i ? "," : "",
                    skips[i].node, skips[i].bytes, skips[i].memory, json_escape(skips[i].why).c_str());
        fprintf(f, "],\n \"notes\": [");
        for (size_t i = 0; i < notes.size(); ++i) fprintf(f, "%s\"%s\"", i ? ", " : "", json_escape(notes[i]).c_str());
        fprintf(f, "]}\n");
        if (f != stdout) {
            fflush(f);
            fsync(fileno(f));
            fclose(f);
            if (rename((o.json + ".part").c_str(), o.json.c_str()) != 0) {
                fprintf(stderr, "host_bandwidth_latency: cannot write %s: %s\n", o.json.c_str(), strerror(errno));
                return kExitUsage;
            }
        }
    }
    cudaFree(dev_a);
    cudaFree(dev_b);
    cudaFree(bad_dev);
    return failures ? kExitValidation : 0;
}
