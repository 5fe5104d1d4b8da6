// Idefics3 / SmolVLM image preprocessing and prompt expansion, as transformers 5.23's Idefics3ImageProcessorPil /
// SmolVLMImageProcessorPil (identical) and Idefics3Processor / SmolVLMProcessor (identical prompt text) do it.
// transformers picks that PIL backend for these models unless torchvision >= 0.27 is installed (docs/vision.md).
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vision/image.h"

namespace cellm::vision {

// The processor's settings (preprocessor_config.json); the defaults are the classes' own.
struct Idefics3Config {
    int longest_edge = 4 * 364;  // size.longest_edge: the image is first scaled so its longest side is this
    int tile = 364;              // max_image_size.longest_edge: the vision encoder's square input
    bool split = true;           // do_image_splitting
    double rescale_factor = 1.0 / 255.0;
    std::array<float, 3> mean = {0.5f, 0.5f, 0.5f};  // image_mean
    std::array<float, 3> std = {0.5f, 0.5f, 0.5f};   // image_std
};

struct Idefics3Image {
    // The tile grid. 0 x 0 when the image became a single frame (it fit one tile, or splitting is off).
    int rows = 0;
    int cols = 0;
    int tile = 0;
    int frames = 0;  // rows * cols tiles plus the whole image, or 1
    // [frames][3][tile][tile], planar RGB normalised: the tiles row by row, then the whole image resized to one
    // tile. Every frame is a whole tile, so the processor's pixel_attention_mask is all ones for it (the
    // processor pads only when it batches prompts with different frame counts).
    std::vector<float> pixels;
};

// Resizes (Lanczos, PIL's arithmetic), splits, rescales and normalises one image.
Idefics3Image preprocess_idefics3(const Image& image, const Idefics3Config& config);

// Image tokens per frame: (image_size / patch_size)^2 patches, merged scale_factor^2 at a time by the pixel
// shuffle (processor_config.json's image_seq_len; 64 for SmolVLM-256M: 512, 16, 4).
int idefics3_image_seq_len(int image_size, int patch_size, int scale_factor);

// The text that stands for one image in the prompt: per tile <fake_token_around_image><row_R_col_C> and
// image_seq_len <image>, a newline after each row, then a newline and the global image
// <fake_token_around_image><global-img><image>...<fake_token_around_image>; only the latter for a 0 x 0 grid.
std::string idefics3_image_prompt(int rows, int cols, int image_seq_len);

// `text` with its i-th "<image>" replaced by images[i]'s prompt text. Throws cellm::Error when the counts differ.
std::string expand_image_tokens(std::string_view text, std::span<const Idefics3Image> images, int image_seq_len);

}  // namespace cellm::vision
