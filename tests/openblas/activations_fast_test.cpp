// The fast activations (activations_fast.hpp), every table this CPU can run, against the reference's formulas
// evaluated in double (whose error is a billionth of a float's last place): a dense sweep of [-20, 20], a sparser
// one of every float magnitude, the special values, every tail length, and outputs that alias inputs.
#include "activations_fast.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using cellm::openblas::Activations;

// The largest error allowed, in units of the last place of the exact result. Measured over every float (the
// disabled test below): 2.34 ULP for GELU, 2.40 for SiLU, relative errors below 1.47 * 2^-23. GLU rounds once
// more, and a product at the top of its binade doubles that relative error in ULP: 2 * 1.47 + 0.5 < 3.5
// (3.29 measured with such products, 2.80 in the sweep below).
constexpr double max_ulps = 3.0, max_ulps_glu = 3.5;
// Results smaller than this may be -0 (activations_fast.hpp): they are held to an absolute bound instead.
constexpr double tiny = 1e-36;

// Both tend to 0 at -inf, which the formulas below evaluate as inf / inf.
double gelu_exact(float x) {
    if (x == -INFINITY) return 0.0;
    const double v = x;
    const double u = double{cellm::openblas::gelu_sqrt_2_over_pi} * (v + double{cellm::openblas::gelu_cubic} * v * v * v);
    // = 0.5 v (1 + tanh u), without the cancellation of 1 + tanh u for negative u.
    return v / (1.0 + std::exp(-2.0 * u));
}

double silu_exact(float x) {
    if (x == -INFINITY) return 0.0;
    return double{x} / (1.0 + std::exp(-double{x}));
}

// |got - want| in units of the last place of a float at want (2^-149 below the normal range). An infinite
// `got` counts as 2^128, one place past FLT_MAX.
double ulps(float got, double want) {
    const int exponent = std::max(std::ilogb(want), FLT_MIN_EXP - 1);
    const double g = std::isinf(got) ? std::copysign(std::ldexp(1.0, FLT_MAX_EXP), got) : got;
    return std::fabs(g - want) / std::ldexp(1.0, exponent - (FLT_MANT_DIG - 1));
}

// Checks every result against its exact value; returns the worst error in ULP of those held to `bound`. GLU's
// results are scaled by `up`, and so is the bound for tiny ones.
double check(const std::vector<float>& inputs, const std::vector<float>& got, const std::vector<double>& want,
             double bound, const std::vector<float>* up = nullptr) {
    double worst = 0.0;
    int failures = 0;
    for (size_t i = 0; i < inputs.size() && failures < 10; ++i) {
        const double w = want[i], small = up ? tiny * std::fabs(double{(*up)[i]}) : tiny;
        bool ok;
        if (std::isnan(w)) ok = std::isnan(got[i]);
        else if (std::isinf(static_cast<float>(w))) ok = got[i] == static_cast<float>(w);  // overflows
        else if (std::fabs(w) < small) ok = std::fabs(double{got[i]} - w) <= small;
        else {
            const double e = ulps(got[i], w);
            worst = std::max(worst, e);
            ok = e <= bound;
        }
        if (!ok) {
            ++failures;
            ADD_FAILURE() << "input " << inputs[i] << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(inputs[i])
                          << std::dec << "): got " << got[i] << ", exact " << w;
        }
    }
    return worst;
}

// Every stride-th float of [-20, 20], every 1021st float of any magnitude, and the special values.
std::vector<float> sweep(uint32_t stride) {
    std::vector<float> v;
    const uint32_t twenty = std::bit_cast<uint32_t>(20.0f), inf = std::bit_cast<uint32_t>(INFINITY);
    for (uint32_t sign : {0u, 0x80000000u}) {
        for (uint32_t bits = 0; bits <= twenty; bits += stride) v.push_back(std::bit_cast<float>(sign | bits));
        for (uint32_t bits = twenty; bits < inf; bits += 1021) v.push_back(std::bit_cast<float>(sign | bits));
    }
    for (float s : {0.0f, FLT_TRUE_MIN, FLT_MIN, std::nextafter(FLT_MIN, 0.0f), 1.0f, 9.7f, 88.0f, 88.7f, 89.0f,
                    104.0f, 1e19f, FLT_MAX, INFINITY}) {
        v.push_back(s);
        v.push_back(-s);
    }
    v.push_back(std::numeric_limits<float>::quiet_NaN());
    v.push_back(-std::numeric_limits<float>::quiet_NaN());
    return v;
}

const std::vector<float>& inputs() {
    static const std::vector<float> v = sweep(257);
    return v;
}

// The exact GELU or SiLU of inputs(), computed once for the tests that share them.
const std::vector<double>& exact(bool gelu) {
    static std::vector<double> cache[2];
    std::vector<double>& want = cache[gelu ? 1 : 0];
    if (want.empty())
        for (float x : inputs()) want.push_back(gelu ? gelu_exact(x) : silu_exact(x));
    return want;
}

// Gate values scaled by `up`: random, of both signs, and the ones that make a product special.
std::vector<float> ups(size_t n) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    for (size_t i = 0; i < n; i += 101) v[i] = (i / 101) % 2 ? 0.0f : 1.0f;
    return v;
}

void report(const Activations* t, const char* what, double worst) {
    std::printf("%s %s: worst %.3f ULP\n", t->isa, what, worst);
}

TEST(OpenblasActivationsFast, GeluWithinBound) {
    const std::vector<double>& want = exact(true);
    for (const Activations* t : cellm::openblas::runnable_activations()) {
        SCOPED_TRACE(t->isa);
        std::vector<float> got(inputs().size());
        t->gelu(inputs().data(), got.data(), static_cast<int64_t>(got.size()));
        report(t, "gelu", check(inputs(), got, want, max_ulps));
    }
}

TEST(OpenblasActivationsFast, SiluWithinBound) {
    const std::vector<double>& want = exact(false);
    for (const Activations* t : cellm::openblas::runnable_activations()) {
        SCOPED_TRACE(t->isa);
        std::vector<float> got(inputs().size());
        t->silu(inputs().data(), got.data(), static_cast<int64_t>(got.size()));
        report(t, "silu", check(inputs(), got, want, max_ulps));
    }
}

TEST(OpenblasActivationsFast, GluWithinBound) {
    const std::vector<float> up = ups(inputs().size());
    for (bool gelu : {true, false}) {
        std::vector<double> want = exact(gelu);
        for (size_t i = 0; i < want.size(); ++i) want[i] *= double{up[i]};
        for (const Activations* t : cellm::openblas::runnable_activations()) {
            SCOPED_TRACE(std::string(t->isa) + (gelu ? " gelu" : " silu"));
            std::vector<float> got(inputs().size());
            t->glu(inputs().data(), up.data(), got.data(), static_cast<int64_t>(got.size()), gelu);
            report(t, gelu ? "glu gelu" : "glu silu", check(inputs(), got, want, max_ulps_glu, &up));
        }
    }
}

// Every float, as the bound above was measured: for a new polynomial or instruction set, run with
// --gtest_also_run_disabled_tests (minutes).
TEST(OpenblasActivationsFast, DISABLED_EveryFloatWithinBound) {
    const std::vector<const Activations*>& tables = cellm::openblas::runnable_activations();
    for (bool gelu : {true, false}) {
        std::vector<double> worst(tables.size());
        std::vector<float> x(size_t{1} << 20), got(x.size());
        std::vector<double> want(x.size());
        for (uint64_t start = 0; start < (uint64_t{1} << 32); start += x.size()) {
            for (size_t i = 0; i < x.size(); ++i) {
                x[i] = std::bit_cast<float>(static_cast<uint32_t>(start + i));
                want[i] = gelu ? gelu_exact(x[i]) : silu_exact(x[i]);
            }
            for (size_t k = 0; k < tables.size(); ++k) {
                SCOPED_TRACE(tables[k]->isa);
                (gelu ? tables[k]->gelu : tables[k]->silu)(x.data(), got.data(), static_cast<int64_t>(x.size()));
                worst[k] = std::max(worst[k], check(x, got, want, max_ulps));
            }
            if (HasFailure()) return;
        }
        for (size_t k = 0; k < tables.size(); ++k) report(tables[k], gelu ? "gelu" : "silu", worst[k]);
    }
}

TEST(OpenblasActivationsFast, SpecialValues) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> x{-INFINITY, INFINITY, nan, -FLT_MAX, FLT_MAX, 0.0f, -0.0f};
    for (const Activations* t : cellm::openblas::runnable_activations()) {
        SCOPED_TRACE(t->isa);
        for (auto f : {t->gelu, t->silu}) {
            std::vector<float> y(x.size());
            f(x.data(), y.data(), static_cast<int64_t>(x.size()));
            EXPECT_EQ(y[0], 0.0f);
            EXPECT_EQ(y[1], INFINITY);
            EXPECT_TRUE(std::isnan(y[2]));
            EXPECT_EQ(y[3], 0.0f);
            EXPECT_EQ(y[4], FLT_MAX);
            EXPECT_EQ(std::bit_cast<uint32_t>(y[5]), 0u);
            EXPECT_EQ(std::bit_cast<uint32_t>(y[6]), 0x80000000u);
        }
    }
}

// Every length up to 67 (several vectors and every tail) from an odd offset: each result equals the one the
// same element gets in a long call, and nothing past the end is written.
TEST(OpenblasActivationsFast, TailsMatchWholeVectors) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-12.0f, 12.0f);
    std::vector<float> x(68), up(68);
    for (size_t i = 0; i < x.size(); ++i) x[i] = u(rng), up[i] = u(rng);
    for (const Activations* t : cellm::openblas::runnable_activations()) {
        SCOPED_TRACE(t->isa);
        for (int kind = 0; kind < 4; ++kind) {
            auto run = [&](int64_t offset, int64_t n, float* out) {
                if (kind == 0) t->gelu(x.data() + offset, out, n);
                if (kind == 1) t->silu(x.data() + offset, out, n);
                if (kind >= 2) t->glu(x.data() + offset, up.data() + offset, out, n, kind == 2);
            };
            std::vector<float> whole(68);
            run(0, 68, whole.data());
            for (int64_t n = 1; n <= 67; ++n) {
                std::vector<float> out(static_cast<size_t>(n) + 16, 12345.0f);
                run(1, n, out.data());
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(whole[i + 1]))
                        << "kind " << kind << " length " << n << " element " << i;
                for (size_t i = static_cast<size_t>(n); i < out.size(); ++i)
                    ASSERT_EQ(out[i], 12345.0f) << "kind " << kind << " length " << n;
            }
        }
    }
}

TEST(OpenblasActivationsFast, OutputMayAliasAnInput) {
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> u(-12.0f, 12.0f);
    const int64_t n = 61;
    std::vector<float> x(n), up(n);
    for (int64_t i = 0; i < n; ++i) x[i] = u(rng), up[i] = u(rng);
    for (const Activations* t : cellm::openblas::runnable_activations()) {
        SCOPED_TRACE(t->isa);
        for (bool gelu : {true, false}) {
            std::vector<float> want(n), in_gate = x, in_up = up, in_x = x;
            t->glu(x.data(), up.data(), want.data(), n, gelu);
            t->glu(in_gate.data(), up.data(), in_gate.data(), n, gelu);
            t->glu(x.data(), in_up.data(), in_up.data(), n, gelu);
            EXPECT_EQ(in_gate, want);
            EXPECT_EQ(in_up, want);
            std::vector<float> single(n);
            (gelu ? t->gelu : t->silu)(x.data(), single.data(), n);
            (gelu ? t->gelu : t->silu)(in_x.data(), in_x.data(), n);
            EXPECT_EQ(in_x, single);
        }
    }
}

// Attention's softmax against the same in double: each weight within a relative 1e-6 (the exp's 2.4 ULP plus the
// sum's and the scaling's rounding over a few hundred scores) of the exact value, over lengths with and without
// tails, scores spread like real attention logits, and a run far below the largest (weights under exp's range).
TEST(OpenblasActivationsFast, SoftmaxWithinBound) {
    std::mt19937 rng(3);
    std::normal_distribution<float> logit(0.0f, 6.0f);
    for (const Activations* t : cellm::openblas::runnable_activations()) {
        SCOPED_TRACE(t->isa);
        for (const int64_t n : {1, 2, 7, 16, 17, 33, 67, 300, 1000}) {
            std::vector<float> x(static_cast<size_t>(n));
            for (float& v : x) v = logit(rng);
            if (n > 20) x[5] = -2000.0f;  // exp underflows: weight 0
            const float scale = 0.125f;
            double best = -INFINITY, sum = 0.0;
            for (float v : x) best = std::max(best, double{scale} * v);
            std::vector<double> want(x.size());
            for (size_t i = 0; i < x.size(); ++i) sum += want[i] = std::exp(double{scale} * x[i] - best);
            for (double& w : want) w /= sum;
            std::vector<float> got = x;
            t->softmax(got.data(), n, scale);
            for (size_t i = 0; i < x.size(); ++i)
                ASSERT_NEAR(got[i], want[i], 1e-6 * want[i] + 1e-30) << "n " << n << ", weight " << i;
        }
    }
}

}  // namespace
