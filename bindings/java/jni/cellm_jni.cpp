// libcellm_jni: the JNI side of the Java binding (dev.cellm.CellmNative), a direct mapping of cellm.h.
//
// Handles cross as jlong. Text crosses as UTF-8 byte arrays in both directions, never through NewStringUTF or
// GetStringUTFChars: those speak JNI's modified UTF-8, which encodes a character outside the BMP (an emoji) as two
// surrogates of three bytes each. A failed cellm call throws dev.cellm.CellmException with its result and
// cellm_last_error(). Nothing here locks or keeps state besides the cached class references: the Java side guards
// the handles' lifetimes and serialises the calls on a session. Sessions are polled from Java threads (no on_event),
// so no Java code ever runs on the engine's scheduler thread.
#include <cellm/cellm.h>
#include <jni.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

// ---- Classes and errors ------------------------------------------------------------------------------------------

jclass g_exception_class;       // dev.cellm.CellmException
jmethodID g_exception_factory;  // static CellmException fromNative(int, byte[])
jclass g_byte_array_class;      // byte[]

// Thrown after a failure of the JNI calls themselves (a Java exception is then already pending).
struct JavaException {};

void check(JNIEnv* env) {
    if (env->ExceptionCheck()) throw JavaException{};
}

jbyteArray new_bytes(JNIEnv* env, const void* data, size_t size) {
    if (size > INT32_MAX) {
        env->ThrowNew(env->FindClass("java/lang/OutOfMemoryError"), "cellm: text too large for a Java array");
        throw JavaException{};
    }
    jbyteArray out = env->NewByteArray(static_cast<jsize>(size));
    check(env);
    if (size > 0) env->SetByteArrayRegion(out, 0, static_cast<jsize>(size), static_cast<const jbyte*>(data));
    return out;
}

jbyteArray new_bytes(JNIEnv* env, const char* text) {
    return new_bytes(env, text, text == nullptr ? 0 : std::strlen(text));
}

// Throws CellmException for a failed result; the message is read at once, before any other cellm call.
void ok(JNIEnv* env, cellm_result result) {
    if (result == CELLM_SUCCESS) return;
    jbyteArray message = new_bytes(env, cellm_last_error());
    auto exception = static_cast<jthrowable>(
        env->CallStaticObjectMethod(g_exception_class, g_exception_factory, static_cast<jint>(result), message));
    check(env);
    env->Throw(exception);
    throw JavaException{};
}

// Runs body, turning C++ failures into pending Java exceptions; returns `failed` when one is pending.
template <typename T, typename Body>
T guarded(JNIEnv* env, T failed, Body body) {
    try {
        return body();
    } catch (const JavaException&) {
    } catch (const std::bad_alloc&) {
        if (!env->ExceptionCheck()) env->ThrowNew(env->FindClass("java/lang/OutOfMemoryError"), "cellm_jni");
    } catch (...) {
        if (!env->ExceptionCheck()) env->ThrowNew(env->FindClass("java/lang/IllegalStateException"), "cellm_jni");
    }
    return failed;
}

template <typename Body>
void guarded_void(JNIEnv* env, Body body) {
    guarded(env, 0, [&] {
        body();
        return 0;
    });
}

// ---- Arguments ---------------------------------------------------------------------------------------------------

// A Java byte[] of UTF-8 as a NUL-terminated C string; a null array is a NULL pointer.
class Utf8 {
public:
    Utf8(JNIEnv* env, jbyteArray bytes) : null_(bytes == nullptr) {
        if (null_) return;
        text_.resize(static_cast<size_t>(env->GetArrayLength(bytes)));
        env->GetByteArrayRegion(bytes, 0, static_cast<jsize>(text_.size()), reinterpret_cast<jbyte*>(text_.data()));
        check(env);
    }
    const char* c_str() const { return null_ ? nullptr : text_.c_str(); }

private:
    bool null_;
    std::string text_;
};

// A Java byte[][] as strings (each NUL-terminated); `present` is false for a null array.
struct Utf8List {
    Utf8List(JNIEnv* env, jobjectArray arrays) : present(arrays != nullptr) {
        if (!present) return;
        const jsize n = env->GetArrayLength(arrays);
        for (jsize i = 0; i < n; ++i) {
            auto bytes = static_cast<jbyteArray>(env->GetObjectArrayElement(arrays, i));
            check(env);
            Utf8 text(env, bytes);
            strings.emplace_back(text.c_str() == nullptr ? "" : text.c_str());
            env->DeleteLocalRef(bytes);
        }
        for (const std::string& s : strings) pointers.push_back(s.c_str());
    }
    bool present;
    std::vector<std::string> strings;
    std::vector<const char*> pointers;
};

// Image bytes, copied: an image is encoded during the submit call, which may take long, so the arrays are not
// pinned (GetPrimitiveArrayCritical would stall the garbage collector for that time).
struct Images {
    Images(JNIEnv* env, jobjectArray arrays) : present(arrays != nullptr) {
        if (!present) return;
        const jsize n = env->GetArrayLength(arrays);
        data.resize(static_cast<size_t>(n));
        for (jsize i = 0; i < n; ++i) {
            auto bytes = static_cast<jbyteArray>(env->GetObjectArrayElement(arrays, i));
            check(env);
            auto& d = data[static_cast<size_t>(i)];
            d.resize(static_cast<size_t>(env->GetArrayLength(bytes)));
            env->GetByteArrayRegion(bytes, 0, static_cast<jsize>(d.size()), d.data());
            check(env);
            env->DeleteLocalRef(bytes);
        }
        for (const auto& d : data) images.push_back({d.empty() ? nullptr : d.data(), d.size()});
    }
    bool present;
    std::vector<std::vector<jbyte>> data;
    std::vector<cellm_image> images;
};

std::vector<int32_t> ints(JNIEnv* env, jintArray array) {
    std::vector<int32_t> out(static_cast<size_t>(env->GetArrayLength(array)));
    static_assert(sizeof(jint) == sizeof(int32_t));
    env->GetIntArrayRegion(array, 0, static_cast<jsize>(out.size()), reinterpret_cast<jint*>(out.data()));
    check(env);
    return out;
}

jintArray new_ints(JNIEnv* env, const int32_t* values, size_t n) {
    jintArray out = env->NewIntArray(static_cast<jsize>(n));
    check(env);
    if (n > 0) env->SetIntArrayRegion(out, 0, static_cast<jsize>(n), reinterpret_cast<const jint*>(values));
    return out;
}

jobjectArray new_byte_arrays(JNIEnv* env, const std::vector<std::string>& strings) {
    jobjectArray out = env->NewObjectArray(static_cast<jsize>(strings.size()), g_byte_array_class, nullptr);
    check(env);
    for (size_t i = 0; i < strings.size(); ++i) {
        jbyteArray bytes = new_bytes(env, strings[i].data(), strings[i].size());
        env->SetObjectArrayElement(out, static_cast<jsize>(i), bytes);
        env->DeleteLocalRef(bytes);
    }
    return out;
}

cellm_engine* engine_of(jlong handle) {
    return reinterpret_cast<cellm_engine*>(static_cast<intptr_t>(handle));
}
cellm_session* session_of(jlong handle) {
    return reinterpret_cast<cellm_session*>(static_cast<intptr_t>(handle));
}
jlong handle_of(const void* pointer) {
    return static_cast<jlong>(reinterpret_cast<intptr_t>(pointer));
}

// ---- Library and engine ------------------------------------------------------------------------------------------

jintArray version(JNIEnv* env, jclass) {
    return guarded<jintArray>(env, nullptr, [&] {
        int32_t v[2] = {0, 0};
        cellm_version(&v[0], &v[1]);
        return new_ints(env, v, 2);
    });
}

void collect_backend(const char* name, const char* description, void* user_data) {
    auto* out = static_cast<std::vector<std::string>*>(user_data);
    out->emplace_back(name == nullptr ? "" : name);
    out->emplace_back(description == nullptr ? "" : description);
}

jobjectArray list_backends(JNIEnv* env, jclass, jbyteArray plugin_path) {
    return guarded<jobjectArray>(env, nullptr, [&] {
        const Utf8 path(env, plugin_path);
        std::vector<std::string> found;
        ok(env, cellm_list_backends(path.c_str(), collect_backend, &found));
        return new_byte_arrays(env, found);
    });
}

jlong engine_open(JNIEnv* env, jclass, jbyteArray manifest_path, jbyteArray manifest_text, jbyteArray model_path,
                  jbyteArray backend, jint threads, jint context_length, jint max_sessions, jbyteArray plugin_path,
                  jbyteArray mmproj_path, jbyteArray precision, jbyteArray kv_type, jint memory_budget_mib) {
    return guarded<jlong>(env, 0, [&] {
        const Utf8 manifest_path_s(env, manifest_path), manifest_text_s(env, manifest_text),
            model_path_s(env, model_path), backend_s(env, backend), plugin_path_s(env, plugin_path),
            mmproj_path_s(env, mmproj_path), precision_s(env, precision), kv_type_s(env, kv_type);
        cellm_engine_options options;
        cellm_engine_options_init(&options);
        options.manifest_path = manifest_path_s.c_str();
        options.manifest_text = manifest_text_s.c_str();
        options.model_path = model_path_s.c_str();
        options.backend = backend_s.c_str();
        options.threads = threads;
        options.context_length = context_length;
        options.max_sessions = max_sessions;
        options.plugin_path = plugin_path_s.c_str();
        options.mmproj_path = mmproj_path_s.c_str();
        options.precision = precision_s.c_str();
        options.kv_type = kv_type_s.c_str();
        options.memory_budget_mib = memory_budget_mib;
        cellm_engine* engine = nullptr;
        ok(env, cellm_engine_open(&options, &engine));
        return handle_of(engine);
    });
}

void engine_close(JNIEnv*, jclass, jlong engine) {
    cellm_engine_close(engine_of(engine));
}

jobjectArray engine_info(JNIEnv* env, jclass, jlong engine, jlongArray numbers) {
    return guarded<jobjectArray>(env, nullptr, [&] {
        cellm_engine_info info;
        std::memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        ok(env, cellm_engine_get_info(engine_of(engine), &info));
        const jlong n[11] = {info.n_vocab,      info.context_length,     info.max_sessions,
                             info.kv_blocks,    info.kv_block_size,      info.kv_bytes_per_token,
                             info.model_has_chat_template, info.model_takes_images, info.weights_bytes,
                             info.scratch_bytes, info.kv_pool_bytes};
        env->SetLongArrayRegion(numbers, 0, 11, n);
        check(env);
        const auto s = [](const char* text) { return std::string(text == nullptr ? "" : text); };
        return new_byte_arrays(env, {s(info.model_name), s(info.model_path), s(info.arch), s(info.backend),
                                     s(info.chat_template)});
    });
}

void engine_stats(JNIEnv* env, jclass, jlong engine, jlongArray out) {
    guarded_void(env, [&] {
        cellm_engine_stats stats;
        std::memset(&stats, 0, sizeof stats);
        stats.struct_size = sizeof stats;
        ok(env, cellm_engine_get_stats(engine_of(engine), &stats));
        const jlong n[12] = {stats.sessions,       stats.running,        stats.waiting,     stats.kv_blocks,
                             stats.kv_blocks_used, stats.kv_blocks_free, stats.prefix_hit_tokens,
                             stats.steps,          stats.batched_tokens, stats.preemptions, stats.copied_blocks,
                             stats.kv_bytes_committed};
        env->SetLongArrayRegion(out, 0, 12, n);
        check(env);
    });
}

jintArray engine_tokenize(JNIEnv* env, jclass, jlong engine, jbyteArray text, jboolean add_special) {
    return guarded<jintArray>(env, nullptr, [&] {
        const Utf8 t(env, text);
        // A guess first (a token per byte, plus BOS), the exact size when the guess was short.
        std::vector<int32_t> ids(std::strlen(t.c_str() == nullptr ? "" : t.c_str()) + 2);
        size_t n = 0;
        ok(env, cellm_engine_tokenize(engine_of(engine), t.c_str(), add_special ? 1 : 0, ids.data(), ids.size(), &n));
        if (n > ids.size()) {
            ids.resize(n);
            ok(env, cellm_engine_tokenize(engine_of(engine), t.c_str(), add_special ? 1 : 0, ids.data(), ids.size(),
                                          &n));
        }
        return new_ints(env, ids.data(), n);
    });
}

// ---- Sessions ----------------------------------------------------------------------------------------------------

// Which of cellm_session_options' fields the Java side sets: the indices of CellmNative (floats, then longs).
enum : int { temperature, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty, float_count };
enum : int { top_k, repeat_last_n, seed, max_tokens, priority, parallel_tool_calls, long_count };

// cellm_session_options_init's defaults with the values Java sets. Holds the strings the options point to.
struct SessionOptions {
    SessionOptions(JNIEnv* env, jlong engine, jbyteArray name_bytes, jint set, jfloatArray floats_array,
                   jlongArray longs_array, jobjectArray stop_arrays, jbyteArray grammar_bytes, jbyteArray schema_bytes,
                   jintArray bias_tokens, jfloatArray bias_values, jbyteArray tools_bytes, jbyteArray tool_choice_bytes)
        : name(env, name_bytes), stop(env, stop_arrays), grammar(env, grammar_bytes), json_schema(env, schema_bytes),
          tools(env, tools_bytes), tool_choice(env, tool_choice_bytes) {
        ok(env, cellm_session_options_init(engine_of(engine), &options));
        jfloat f[float_count];
        jlong l[long_count];
        env->GetFloatArrayRegion(floats_array, 0, float_count, f);
        env->GetLongArrayRegion(longs_array, 0, long_count, l);
        check(env);
        const auto has_float = [&](int i) { return (set & (1 << i)) != 0; };
        const auto has_long = [&](int i) { return (set & (1 << (float_count + i))) != 0; };
        if (has_float(temperature)) options.temperature = f[temperature];
        if (has_float(top_p)) options.top_p = f[top_p];
        if (has_float(min_p)) options.min_p = f[min_p];
        if (has_float(repeat_penalty)) options.repeat_penalty = f[repeat_penalty];
        if (has_float(frequency_penalty)) options.frequency_penalty = f[frequency_penalty];
        if (has_float(presence_penalty)) options.presence_penalty = f[presence_penalty];
        // Out of range values reach cellm, which refuses them, rather than wrapping here.
        const auto int32 = [](jlong v) {
            return static_cast<int32_t>(v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v);
        };
        if (has_long(top_k)) options.top_k = int32(l[top_k]);
        if (has_long(repeat_last_n)) options.repeat_last_n = int32(l[repeat_last_n]);
        if (has_long(seed)) options.seed = static_cast<uint64_t>(l[seed]);
        if (has_long(max_tokens)) options.max_tokens = int32(l[max_tokens]);
        if (has_long(priority)) options.priority = int32(l[priority]);
        if (has_long(parallel_tool_calls)) options.parallel_tool_calls = l[parallel_tool_calls] != 0 ? 1 : 0;
        if (name.c_str() != nullptr) options.name = name.c_str();
        if (stop.present) {
            options.stop = stop.pointers.empty() ? nullptr : stop.pointers.data();
            options.n_stop = stop.pointers.size();
        }
        options.grammar = grammar.c_str();
        options.json_schema = json_schema.c_str();
        options.tools = tools.c_str();
        options.tool_choice = tool_choice.c_str();
        if (bias_tokens != nullptr && bias_values != nullptr) {
            // SamplingOptions makes both arrays from one map, so they are equally long.
            const jsize n = std::min(env->GetArrayLength(bias_tokens), env->GetArrayLength(bias_values));
            std::vector<jint> tokens(static_cast<size_t>(n));
            std::vector<jfloat> values(static_cast<size_t>(n));
            env->GetIntArrayRegion(bias_tokens, 0, n, tokens.data());
            env->GetFloatArrayRegion(bias_values, 0, n, values.data());
            check(env);
            for (jsize i = 0; i < n; ++i) bias.push_back({tokens[static_cast<size_t>(i)], values[static_cast<size_t>(i)]});
            options.logit_bias = bias.empty() ? nullptr : bias.data();
            options.n_logit_bias = bias.size();
        }
        options.on_event = nullptr;  // polled from Java
        options.user_data = nullptr;
    }
    cellm_session_options options;
    Utf8 name;
    Utf8List stop;
    Utf8 grammar, json_schema;
    std::vector<cellm_logit_bias> bias;
    Utf8 tools, tool_choice;
};

jlong session_create(JNIEnv* env, jclass, jlong engine, jbyteArray name, jint set, jfloatArray floats,
                     jlongArray longs, jobjectArray stop, jbyteArray grammar, jbyteArray json_schema,
                     jintArray bias_tokens, jfloatArray bias_values, jbyteArray tools, jbyteArray tool_choice) {
    return guarded<jlong>(env, 0, [&] {
        const SessionOptions o(env, engine, name, set, floats, longs, stop, grammar, json_schema, bias_tokens,
                               bias_values, tools, tool_choice);
        cellm_session* session = nullptr;
        ok(env, cellm_session_create(engine_of(engine), &o.options, &session));
        return handle_of(session);
    });
}

void session_configure(JNIEnv* env, jclass, jlong engine, jlong session, jbyteArray name, jint set,
                       jfloatArray floats, jlongArray longs, jobjectArray stop, jbyteArray grammar,
                       jbyteArray json_schema, jintArray bias_tokens, jfloatArray bias_values, jbyteArray tools,
                       jbyteArray tool_choice) {
    guarded_void(env, [&] {
        const SessionOptions o(env, engine, name, set, floats, longs, stop, grammar, json_schema, bias_tokens,
                               bias_values, tools, tool_choice);
        ok(env, cellm_session_configure(session_of(session), &o.options));
    });
}

jlong session_fork(JNIEnv* env, jclass, jlong session) {
    return guarded<jlong>(env, 0, [&] {
        cellm_session* fork = nullptr;
        ok(env, cellm_session_fork(session_of(session), &fork));
        return handle_of(fork);
    });
}

void session_submit_text(JNIEnv* env, jclass, jlong session, jbyteArray text, jobjectArray images) {
    guarded_void(env, [&] {
        const Utf8 t(env, text);
        const Images i(env, images);
        if (i.present) {
            ok(env, cellm_session_submit_text_images(session_of(session), t.c_str(), i.images.data(), i.images.size()));
        } else {
            ok(env, cellm_session_submit_text(session_of(session), t.c_str()));
        }
    });
}

void session_submit_chat(JNIEnv* env, jclass, jlong session, jobjectArray roles, jobjectArray contents,
                         jobjectArray images) {
    guarded_void(env, [&] {
        const Utf8List r(env, roles), c(env, contents);
        const Images i(env, images);
        std::vector<cellm_message> messages;
        for (size_t k = 0; k < r.pointers.size() && k < c.pointers.size(); ++k) {
            messages.push_back({r.pointers[k], c.pointers[k]});
        }
        const cellm_message* m = messages.empty() ? nullptr : messages.data();
        if (i.present) {
            ok(env, cellm_session_submit_chat_images(session_of(session), m, messages.size(), i.images.data(),
                                                     i.images.size()));
        } else {
            ok(env, cellm_session_submit_chat(session_of(session), m, messages.size()));
        }
    });
}

void session_submit_tokens(JNIEnv* env, jclass, jlong session, jintArray tokens) {
    guarded_void(env, [&] {
        const std::vector<int32_t> ids = ints(env, tokens);
        ok(env, cellm_session_submit_tokens(session_of(session), ids.data(), ids.size()));
    });
}

void session_submit_chat_json(JNIEnv* env, jclass, jlong session, jbyteArray messages_json) {
    guarded_void(env, [&] {
        const Utf8 json(env, messages_json);
        ok(env, cellm_session_submit_chat_json(session_of(session), json.c_str()));
    });
}

// The strings of a TOOL_CALL event are copied here: the next poll ends their life.
jbyteArray session_poll(JNIEnv* env, jclass, jlong session, jint timeout_ms, jintArray out, jobjectArray tool_call) {
    return guarded<jbyteArray>(env, nullptr, [&]() -> jbyteArray {
        cellm_event event;
        std::memset(&event, 0, sizeof event);
        event.struct_size = sizeof event;
        const cellm_result result = cellm_session_poll(session_of(session), timeout_ms, &event);
        if (result == CELLM_E_TIMEOUT) return nullptr;
        ok(env, result);
        const jint fields[4] = {static_cast<jint>(event.kind), event.generated_tokens,
                                static_cast<jint>(event.finish_reason), event.tool_call_index};
        env->SetIntArrayRegion(out, 0, 4, fields);
        check(env);
        if (event.kind == CELLM_EVENT_TOOL_CALL && tool_call != nullptr) {
            const char* strings[2] = {event.tool_call_id, event.tool_name};
            for (jsize i = 0; i < 2; ++i) {
                jbyteArray bytes = new_bytes(env, strings[i]);
                env->SetObjectArrayElement(tool_call, i, bytes);
                check(env);
                env->DeleteLocalRef(bytes);
            }
        }
        return new_bytes(env, event.text, event.text == nullptr ? 0 : event.text_len);
    });
}

jboolean session_wait(JNIEnv* env, jclass, jlong session, jint timeout_ms) {
    return guarded<jboolean>(env, JNI_FALSE, [&]() -> jboolean {
        const cellm_result result = cellm_session_wait(session_of(session), timeout_ms);
        if (result == CELLM_E_TIMEOUT) return JNI_FALSE;
        ok(env, result);
        return JNI_TRUE;
    });
}

void session_cancel(JNIEnv* env, jclass, jlong session) {
    guarded_void(env, [&] { ok(env, cellm_session_cancel(session_of(session))); });
}

jbyteArray session_stats(JNIEnv* env, jclass, jlong session, jintArray ints_out, jdoubleArray doubles_out) {
    return guarded<jbyteArray>(env, nullptr, [&] {
        cellm_session_stats stats;
        std::memset(&stats, 0, sizeof stats);
        stats.struct_size = sizeof stats;
        ok(env, cellm_session_get_stats(session_of(session), &stats));
        const jint i[6] = {stats.busy, stats.prompt_tokens, stats.cached_tokens, stats.generated_tokens,
                           stats.preemptions, static_cast<jint>(stats.finish_reason)};
        const jdouble d[3] = {stats.ttft_ms, stats.prefill_tok_s, stats.decode_tok_s};
        env->SetIntArrayRegion(ints_out, 0, 6, i);
        env->SetDoubleArrayRegion(doubles_out, 0, 3, d);
        check(env);
        return new_bytes(env, stats.error);
    });
}

jbyteArray session_text(JNIEnv* env, jclass, jlong session) {
    return guarded<jbyteArray>(env, nullptr, [&] {
        const char* text = nullptr;
        size_t length = 0;
        ok(env, cellm_session_get_text(session_of(session), &text, &length));
        return new_bytes(env, text, text == nullptr ? 0 : length);
    });
}

jbyteArray session_tool_calls(JNIEnv* env, jclass, jlong session) {
    return guarded<jbyteArray>(env, nullptr, [&] {
        const char* json = nullptr;
        size_t length = 0;
        ok(env, cellm_session_get_tool_calls(session_of(session), &json, &length));
        return new_bytes(env, json, json == nullptr ? 0 : length);
    });
}

jintArray session_tokens(JNIEnv* env, jclass, jlong session) {
    return guarded<jintArray>(env, nullptr, [&] {
        const int32_t* tokens = nullptr;
        size_t n = 0;
        ok(env, cellm_session_get_tokens(session_of(session), &tokens, &n));
        return new_ints(env, tokens, tokens == nullptr ? 0 : n);
    });
}

void session_destroy(JNIEnv*, jclass, jlong session) {
    cellm_session_destroy(session_of(session));
}

// ---- Registration ------------------------------------------------------------------------------------------------

template <typename F>
void* fn(F f) {
    return reinterpret_cast<void*>(f);
}

const JNINativeMethod methods[] = {
    {const_cast<char*>("version"), const_cast<char*>("()[I"), fn(version)},
    {const_cast<char*>("listBackends"), const_cast<char*>("([B)[[B"), fn(list_backends)},
    {const_cast<char*>("engineOpen"), const_cast<char*>("([B[B[B[BIII[B[B[B[BI)J"), fn(engine_open)},
    {const_cast<char*>("engineClose"), const_cast<char*>("(J)V"), fn(engine_close)},
    {const_cast<char*>("engineInfo"), const_cast<char*>("(J[J)[[B"), fn(engine_info)},
    {const_cast<char*>("engineStats"), const_cast<char*>("(J[J)V"), fn(engine_stats)},
    {const_cast<char*>("engineTokenize"), const_cast<char*>("(J[BZ)[I"), fn(engine_tokenize)},
    {const_cast<char*>("sessionCreate"), const_cast<char*>("(J[BI[F[J[[B[B[B[I[F[B[B)J"), fn(session_create)},
    {const_cast<char*>("sessionConfigure"), const_cast<char*>("(JJ[BI[F[J[[B[B[B[I[F[B[B)V"),
     fn(session_configure)},
    {const_cast<char*>("sessionFork"), const_cast<char*>("(J)J"), fn(session_fork)},
    {const_cast<char*>("sessionSubmitText"), const_cast<char*>("(J[B[[B)V"), fn(session_submit_text)},
    {const_cast<char*>("sessionSubmitChat"), const_cast<char*>("(J[[B[[B[[B)V"), fn(session_submit_chat)},
    {const_cast<char*>("sessionSubmitTokens"), const_cast<char*>("(J[I)V"), fn(session_submit_tokens)},
    {const_cast<char*>("sessionSubmitChatJson"), const_cast<char*>("(J[B)V"), fn(session_submit_chat_json)},
    {const_cast<char*>("sessionPoll"), const_cast<char*>("(JI[I[[B)[B"), fn(session_poll)},
    {const_cast<char*>("sessionWait"), const_cast<char*>("(JI)Z"), fn(session_wait)},
    {const_cast<char*>("sessionCancel"), const_cast<char*>("(J)V"), fn(session_cancel)},
    {const_cast<char*>("sessionStats"), const_cast<char*>("(J[I[D)[B"), fn(session_stats)},
    {const_cast<char*>("sessionText"), const_cast<char*>("(J)[B"), fn(session_text)},
    {const_cast<char*>("sessionToolCalls"), const_cast<char*>("(J)[B"), fn(session_tool_calls)},
    {const_cast<char*>("sessionTokens"), const_cast<char*>("(J)[I"), fn(session_tokens)},
    {const_cast<char*>("sessionDestroy"), const_cast<char*>("(J)V"), fn(session_destroy)},
};

jclass global_class(JNIEnv* env, const char* name) {
    jclass local = env->FindClass(name);
    if (local == nullptr) return nullptr;
    auto global = static_cast<jclass>(env->NewGlobalRef(local));
    env->DeleteLocalRef(local);
    return global;
}

}  // namespace

// Runs in System.loadLibrary, on a thread whose class loader sees the binding's classes (on Android, a native
// thread's FindClass would not): the classes the native side needs are looked up here, once.
extern "C" JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM* vm, void*) {
    JNIEnv* env = nullptr;
    if (vm->GetEnv(reinterpret_cast<void**>(&env), JNI_VERSION_1_6) != JNI_OK) return JNI_ERR;
    g_exception_class = global_class(env, "dev/cellm/CellmException");
    g_byte_array_class = global_class(env, "[B");
    if (g_exception_class == nullptr || g_byte_array_class == nullptr) return JNI_ERR;
    g_exception_factory =
        env->GetStaticMethodID(g_exception_class, "fromNative", "(I[B)Ldev/cellm/CellmException;");
    if (g_exception_factory == nullptr) return JNI_ERR;
    jclass native_class = env->FindClass("dev/cellm/CellmNative");
    if (native_class == nullptr) return JNI_ERR;
    const jint registered =
        env->RegisterNatives(native_class, methods, static_cast<jint>(sizeof methods / sizeof methods[0]));
    env->DeleteLocalRef(native_class);
    return registered == JNI_OK ? JNI_VERSION_1_6 : JNI_ERR;
}
