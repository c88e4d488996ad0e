// Where the block scheduler puts a one-wave grid (docs/tuning.md#forward-band-waves): blocks of 256 or 512
// threads held k an SM by shared memory, each spinning 40 us after recording its SM and start time.
//     nvcc -O2 -arch=sm_90 tools/kernel/block_placement.cu -o /tmp/bp && /tmp/bp 256 && /tmp/bp 512
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <map>
#include <algorithm>
__global__ void spin(int* sm, unsigned long long* t0, unsigned long long ns) {
  extern __shared__ char s[];
  unsigned long long st, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(st));
  if (threadIdx.x == 0) { unsigned id; asm("mov.u32 %0, %%smid;" : "=r"(id)); sm[blockIdx.x] = id; t0[blockIdx.x] = st; s[0] = 1; }
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - st < ns);
}
int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 256;
  int nsm; cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0);
  int sm_smem, block_smem, reserved;  // the SM's shared memory, a block's most, the driver's share per block
  cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
  cudaDeviceGetAttribute(&block_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, 0);
  cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, block_smem);
  int grids[] = {264, 280, 300, 330, 360, 396, 400, 420, 448, 480, 500, 512, 528};
  int *sm; unsigned long long* t0;
  cudaMalloc(&sm, 4096 * 4); cudaMalloc(&t0, 4096 * 8);
  std::vector<int> hsm(4096); std::vector<unsigned long long> ht(4096);
  for (int k : {3, 4, 5, 6, 8}) {
    size_t smem = (sm_smem / k - reserved) / 128 * 128;
    int occ; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, spin, threads, smem);
    if (occ != k) { printf("k=%d smem=%zu gives %d an SM: skipped\n", k, smem, occ); continue; }
    for (int g : grids) {
      if (g > k * nsm) continue;
      int worst = 0; std::map<int, int> worst_hist; int late_max = 0;
      for (int rep = 0; rep < 5; rep++) {
        spin<<<g, threads, smem>>>(sm, t0, 40000);
        cudaDeviceSynchronize();
        cudaMemcpy(hsm.data(), sm, g * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(ht.data(), t0, g * 8, cudaMemcpyDeviceToHost);
        unsigned long long first = *std::min_element(ht.begin(), ht.begin() + g);
        std::vector<int> per(nsm, 0); int late = 0;
        for (int b = 0; b < g; b++) { per[hsm[b]]++; if (ht[b] - first > 20000) late++; }
        int mx = *std::max_element(per.begin(), per.end());
        late_max = std::max(late_max, late);
        if (mx >= worst) { worst = mx; worst_hist.clear(); for (int c : per) worst_hist[c]++; }
      }
      printf("threads=%d k=%d grid=%d (%.2f an SM, ceil %d): max on one SM %d, late blocks %d, SMs by count:",
             threads, k, g, g / (double)nsm, (g + nsm - 1) / nsm, worst, late_max);
      for (auto& p : worst_hist) printf(" %d:%d", p.first, p.second);
      printf("\n");
    }
  }
  return 0;
}
