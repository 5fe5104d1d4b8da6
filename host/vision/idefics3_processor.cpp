#include "vision/idefics3_processor.h"

#include <cmath>
#include <utility>

#include "error.h"
#include "vision/resample.h"

namespace cellm::vision {
namespace {

constexpr std::string_view kImageToken = "<image>";
constexpr std::string_view kFakeToken = "<fake_token_around_image>";
constexpr std::string_view kGlobalToken = "<global-img>";
constexpr int kMaxSide = 4096;  // the processor's MAX_IMAGE_SIZE

struct Size {
    int height;
    int width;
};

// The processor's arithmetic, double for double (aspect ratios as Python floats, int() truncating).
Size fit_longest_edge(Size s, int longest_edge) {
    const double aspect = static_cast<double>(s.width) / s.height;
    if (s.width >= s.height) {
        s.width = longest_edge;
        s.height = static_cast<int>(s.width / aspect);
        if (s.height % 2 != 0) ++s.height;
    } else {
        s.height = longest_edge;
        s.width = static_cast<int>(s.height * aspect);
        if (s.width % 2 != 0) ++s.width;
    }
    s = {std::max(s.height, 1), std::max(s.width, 1)};
    // Then at most kMaxSide on the longest side, without the rounding to even.
    const double capped_aspect = static_cast<double>(s.width) / s.height;
    if (s.width >= s.height && s.width > kMaxSide) {
        s.width = kMaxSide;
        s.height = static_cast<int>(s.width / capped_aspect);
    } else if (s.height > s.width && s.height > kMaxSide) {
        s.height = kMaxSide;
        s.width = static_cast<int>(s.height * capped_aspect);
    }
    return {std::max(s.height, 1), std::max(s.width, 1)};
}

int round_up(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

// Both sides up to multiples of the tile, the shorter one derived from the longer one's new length.
Size fit_tiles(Size s, int tile) {
    const double aspect = static_cast<double>(s.width) / s.height;
    if (s.width >= s.height) {
        s.width = round_up(s.width, tile);
        s.height = round_up(static_cast<int>(s.width / aspect), tile);
    } else {
        s.height = round_up(s.height, tile);
        s.width = round_up(static_cast<int>(s.height * aspect), tile);
    }
    return s;
}

// One tile-sized frame of `image` at (x0, y0), rescaled and normalised into planar RGB. The rescale is a double
// product rounded to float, the normalisation float arithmetic, as numpy computes them.
void append_frame(const Image& image, int x0, int y0, int tile, const Idefics3Config& config,
                  std::vector<float>& out) {
    for (std::size_t c = 0; c < 3; ++c) {
        for (int y = y0; y < y0 + tile; ++y) {
            const std::uint8_t* row = &image.rgb[(std::size_t(y) * std::size_t(image.width) + std::size_t(x0)) * 3];
            for (std::size_t x = 0; x < std::size_t(tile); ++x) {
                const auto scaled = static_cast<float>(row[x * 3 + c] * config.rescale_factor);
                out.push_back((scaled - config.mean[c]) / config.std[c]);
            }
        }
    }
}

}  // namespace

Idefics3Image preprocess_idefics3(const Image& image, const Idefics3Config& config) {
    if (config.longest_edge < 1 || config.tile < 1)
        throw Error("idefics3: longest_edge and tile must be positive");
    if (image.width < 1 || image.height < 1 ||
        image.rgb.size() != std::size_t(image.width) * std::size_t(image.height) * 3)
        throw Error("idefics3: the image has no pixels or a wrong buffer size");
    const int tile = config.tile;
    const Size first = fit_longest_edge({image.height, image.width}, config.longest_edge);
    const Image resized = resize_lanczos(image, first.width, first.height);

    Idefics3Image out;
    out.tile = tile;
    if (!config.split) {
        out.frames = 1;
        out.pixels.reserve(std::size_t(3) * std::size_t(tile) * std::size_t(tile));
        append_frame(resize_lanczos(resized, tile, tile), 0, 0, tile, config, out.pixels);
        return out;
    }
    const Size grid = fit_tiles(first, tile);
    const Image tiled = resize_lanczos(resized, grid.width, grid.height);
    if (grid.height > tile || grid.width > tile) {
        out.rows = grid.height / tile;
        out.cols = grid.width / tile;
    }
    out.frames = out.rows * out.cols + 1;
    out.pixels.reserve(std::size_t(out.frames) * 3 * std::size_t(tile) * std::size_t(tile));
    for (int r = 0; r < out.rows; ++r)
        for (int c = 0; c < out.cols; ++c) append_frame(tiled, c * tile, r * tile, tile, config, out.pixels);
    // The whole image, from the tile-multiple image (not the original), as one more tile.
    const Image global = out.rows == 0 ? tiled : resize_lanczos(tiled, tile, tile);
    append_frame(global, 0, 0, tile, config, out.pixels);
    return out;
}

int idefics3_image_seq_len(int image_size, int patch_size, int scale_factor) {
    if (image_size < 1 || patch_size < 1 || scale_factor < 1)
        throw Error("idefics3: image_size, patch_size and scale_factor must be positive");
    const int side = image_size / patch_size;
    return static_cast<int>(static_cast<double>(side) * side / (static_cast<double>(scale_factor) * scale_factor));
}

std::string idefics3_image_prompt(int rows, int cols, int image_seq_len) {
    std::string tokens;
    for (int i = 0; i < image_seq_len; ++i) tokens += kImageToken;
    std::string out;
    if (rows != 0 || cols != 0) {
        for (int r = 1; r <= rows; ++r) {
            for (int c = 1; c <= cols; ++c) {
                out += kFakeToken;
                out += "<row_" + std::to_string(r) + "_col_" + std::to_string(c) + ">";
                out += tokens;
            }
            out += '\n';
        }
        out += '\n';
    }
    out += kFakeToken;
    out += kGlobalToken;
    out += tokens;
    out += kFakeToken;
    return out;
}

std::string expand_image_tokens(std::string_view text, std::span<const Idefics3Image> images, int image_seq_len) {
    std::string out;
    std::size_t used = 0;
    std::size_t at = 0;
    for (std::size_t found; (found = text.find(kImageToken, at)) != std::string_view::npos;
         at = found + kImageToken.size()) {
        if (used == images.size())
            throw Error("the prompt has more " + std::string(kImageToken) + " than the " +
                        std::to_string(images.size()) + " images given");
        out += text.substr(at, found - at);
        out += idefics3_image_prompt(images[used].rows, images[used].cols, image_seq_len);
        ++used;
    }
    if (used != images.size())
        throw Error("the prompt has " + std::to_string(used) + " " + std::string(kImageToken) + " for " +
                    std::to_string(images.size()) + " images");
    out += text.substr(at);
    return out;
}

}  // namespace cellm::vision
