package dev.cellm.example;

import dev.cellm.Engine;
import dev.cellm.Message;
import dev.cellm.Prompt;
import dev.cellm.Session;

import java.util.ArrayList;
import java.util.List;

/**
 * A small chat client on the Java binding: opens the engine a manifest describes (or a model file: a path ending
 * in .gguf), then sends each MESSAGE as the next user turn of one conversation and streams the replies.
 *
 * <pre>
 *   java -Djava.library.path=build/bin -cp build/bin/cellm.jar:build/bindings/java/cellm-example.jar \
 *        dev.cellm.example.Chat config/smollm2-135m.toml "What is the capital of France?" "And of Italy?"
 * </pre>
 */
public final class Chat {
    private Chat() {}

    public static void main(String[] args) {
        if (args.length < 2) {
            System.err.println("usage: Chat MANIFEST|MODEL.gguf MESSAGE [MESSAGE...]");
            System.exit(2);
        }
        Engine.Builder builder = Engine.builder();
        if (args[0].endsWith(".gguf")) builder.modelPath(args[0]);
        else builder.manifestPath(args[0]);

        try (Engine engine = builder.open(); Session session = engine.newSession()) {
            Engine.Info info = engine.info();
            System.out.printf("%s (%s) on %s, chat template %s%n", info.modelName(), info.arch(), info.backend(),
                              info.chatTemplate());
            // The whole conversation goes in with every turn; what the session already computed is reused.
            List<Message> conversation = new ArrayList<>();
            for (int turn = 1; turn < args.length; ++turn) {
                conversation.add(Message.user(args[turn]));
                System.out.println("> " + args[turn]);
                Session.Result result = session.generate(Prompt.chat(conversation), (text, generated) -> {
                    System.out.print(text);
                    System.out.flush();
                });
                Session.Stats stats = result.stats();
                System.out.printf("%n[turn %d: %d prompt tokens, %d cached, %d generated, %.1f tok/s, %s]%n", turn,
                                  stats.promptTokens(), stats.cachedTokens(), stats.generatedTokens(),
                                  stats.decodeTokensPerSecond(), result.finishReason());
                conversation.add(Message.assistant(result.text()));
            }
        }
    }
}
