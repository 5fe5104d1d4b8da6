#include "vision/resample.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "error.h"

namespace cellm::vision {
namespace {

constexpr double kSupport = 3.0;
// 8 bits of pixel, 2 bits of headroom for filter sums outside [0, 1], the rest for the weights.
constexpr int kPrecisionBits = 32 - 8 - 2;

double sinc(double x) {
    if (x == 0.0) return 1.0;
    x *= std::numbers::pi;
    return std::sin(x) / x;
}

double lanczos(double x) { return (-kSupport <= x && x < kSupport) ? sinc(x) * sinc(x / kSupport) : 0.0; }

// For each output position along one axis: the first input sample it reads, how many, and their weights.
struct Taps {
    int stride = 0;  // weights per output position
    std::vector<int> first;
    std::vector<int> count;
    std::vector<std::int32_t> weights;
};

Taps make_taps(int in_size, int out_size) {
    const double scale = static_cast<double>(in_size) / out_size;
    // Downscaling widens the filter by the factor so that it averages every input sample it covers.
    const double filter_scale = std::max(scale, 1.0);
    const double support = kSupport * filter_scale;
    Taps taps;
    taps.stride = static_cast<int>(std::ceil(support)) * 2 + 1;
    taps.first.resize(static_cast<std::size_t>(out_size));
    taps.count.resize(static_cast<std::size_t>(out_size));
    taps.weights.assign(static_cast<std::size_t>(out_size) * static_cast<std::size_t>(taps.stride), 0);
    std::vector<double> w(static_cast<std::size_t>(taps.stride));
    const double inverse_scale = 1.0 / filter_scale;  // multiplied, not divided: the last bit of a weight counts
    for (int o = 0; o < out_size; ++o) {
        const double center = (o + 0.5) * scale;
        // The inputs whose centers lie within the support, clamped to the image.
        const int first = std::max(static_cast<int>(center - support + 0.5), 0);
        const int last = std::min(static_cast<int>(center + support + 0.5), in_size);
        const int count = last - first;
        double sum = 0.0;
        for (int i = 0; i < count; ++i) {
            w[static_cast<std::size_t>(i)] = lanczos((i + first - center + 0.5) * inverse_scale);
            sum += w[static_cast<std::size_t>(i)];
        }
        std::int32_t* fixed = &taps.weights[static_cast<std::size_t>(o) * static_cast<std::size_t>(taps.stride)];
        for (int i = 0; i < count; ++i) {
            const double v = sum != 0.0 ? w[static_cast<std::size_t>(i)] / sum : w[static_cast<std::size_t>(i)];
            fixed[i] = static_cast<std::int32_t>(v * (1 << kPrecisionBits) + (v < 0.0 ? -0.5 : 0.5));
        }
        taps.first[static_cast<std::size_t>(o)] = first;
        taps.count[static_cast<std::size_t>(o)] = count;
    }
    return taps;
}

std::uint8_t to_8bit(std::int64_t acc) {
    // acc carries kPrecisionBits of fraction and half a unit already added: the shift rounds, floor for negatives.
    return static_cast<std::uint8_t>(std::clamp<std::int64_t>(acc >> kPrecisionBits, 0, 255));
}

constexpr std::int64_t kHalf = std::int64_t{1} << (kPrecisionBits - 1);

Image resize_rows(const Image& in, int width) {
    const Taps taps = make_taps(in.width, width);
    Image out{width, in.height, std::vector<std::uint8_t>(std::size_t(width) * std::size_t(in.height) * 3)};
    for (std::size_t y = 0; y < std::size_t(in.height); ++y) {
        const std::uint8_t* row = &in.rgb[y * std::size_t(in.width) * 3];
        for (std::size_t x = 0; x < std::size_t(width); ++x) {
            const std::int32_t* k = &taps.weights[x * std::size_t(taps.stride)];
            const std::uint8_t* src = row + std::size_t(taps.first[x]) * 3;
            for (std::size_t c = 0; c < 3; ++c) {
                std::int64_t acc = kHalf;
                for (int i = 0; i < taps.count[x]; ++i) acc += std::int64_t{src[std::size_t(i) * 3 + c]} * k[i];
                out.rgb[(y * std::size_t(width) + x) * 3 + c] = to_8bit(acc);
            }
        }
    }
    return out;
}

Image resize_columns(const Image& in, int height) {
    const Taps taps = make_taps(in.height, height);
    const std::size_t row_bytes = std::size_t(in.width) * 3;
    Image out{in.width, height, std::vector<std::uint8_t>(row_bytes * std::size_t(height))};
    for (std::size_t y = 0; y < std::size_t(height); ++y) {
        const std::int32_t* k = &taps.weights[y * std::size_t(taps.stride)];
        const std::uint8_t* src = &in.rgb[std::size_t(taps.first[y]) * row_bytes];
        for (std::size_t b = 0; b < row_bytes; ++b) {
            std::int64_t acc = kHalf;
            for (int i = 0; i < taps.count[y]; ++i) acc += std::int64_t{src[std::size_t(i) * row_bytes + b]} * k[i];
            out.rgb[y * row_bytes + b] = to_8bit(acc);
        }
    }
    return out;
}

}  // namespace

Image resize_lanczos(const Image& in, int width, int height) {
    if (width < 1 || height < 1 || in.width < 1 || in.height < 1)
        throw Error("cannot resize a " + std::to_string(in.width) + "x" + std::to_string(in.height) + " image to " +
                    std::to_string(width) + "x" + std::to_string(height));
    // A pass only where the size changes. With both, Pillow 13 runs the vertical pass first when the height
    // loses more than twice as many pixels as the width (a cheaper horizontal pass), else the horizontal one:
    // the order fixes where the intermediate 8-bit rounding happens, so it is part of the result.
    if (width == in.width) return height == in.height ? in : resize_columns(in, height);
    if (height == in.height) return resize_rows(in, width);
    const int lost_rows = in.height - height;
    if (lost_rows > 0 && lost_rows > 2 * (in.width - width)) return resize_rows(resize_columns(in, height), width);
    return resize_columns(resize_rows(in, width), height);
}

}  // namespace cellm::vision
