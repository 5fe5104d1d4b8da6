// The table of glibc's expf (2^(i/32) for i < 32), which the x86 and ARM kernel tables' exp_f32 share. Internal
// linkage, as the kernels that include it: each instruction set's file keeps its own copy.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace cellm::openblas {
namespace {

struct ExpTable {
    uint64_t t[32];  // 2^(i / 32) as double bits, less i << 47 (the exponent k adds back)
    ExpTable() {
        for (int i = 0; i < 32; ++i)
            t[i] = std::bit_cast<uint64_t>(static_cast<double>(exp2l(static_cast<long double>(i) / 32))) -
                   (static_cast<uint64_t>(i) << 47);
    }
};

}  // namespace
}  // namespace cellm::openblas
