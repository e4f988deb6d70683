// Package slacktest is an in-process fake of Slack's Web API and Socket Mode that the real slack-go client talks to in tests.
//
// Its answers are held to the answers Slack gave as the SDKs record them (testdata/platforms/slack,
// TestShapesAsRecorded, TestSocketFramesAsRecorded): every field of a concrete recorded answer
// (slack-go's chat.postMessage, python-slack-sdk's answer of the stream methods) is in the fake's with the
// same JSON type; every field of the fake's auth.test, apps.connections.open, chat.update,
// chat.postEphemeral, chat.startStream and chat.appendStream answers is in java-slack-sdk's schema sample
// of them (the union of the fields Slack answered with), with its type; every field of the recorded Socket
// Mode hello, events_api, interactive and disconnect frames is in the fake's. Where the fake still has to
// guess, and why:
//
//   - chat.postMessage: the message object's app_id, bot_id, type and user are not in the recorded answer
//     (slack-go's fixture records text, ts and thread_ts); they follow Slack's documentation.
//   - chat.update: its message carries no ts, app_id or metadata, as in the schema sample; which of the
//     sample's fields Slack fills for a bot's edit follows the documentation.
//   - conversations.open, conversations.history, conversations.replies and chat.stopStream's schema: no
//     recorded answer in the corpus (java-slack-sdk's samples of them, 26 KB to 633 KB, were too large to
//     copy byte for byte here); their shapes follow slack-go's types and Slack's documentation.
//   - Error answers: the corpus records ratelimited (HTTP 429, Retry-After) and missing_scope; the other
//     error codes the fake answers follow the documentation.
//   - Socket Mode: slash_commands envelopes are recorded but the fake makes none of its own (PushFrame
//     sends recorded frames as they are); acks follow slack-go's socketmode types.
//   - Block Kit limits (CheckBlocks, blocks.go): the documented ones; a message that breaks one is answered
//     invalid_blocks, the code Slack documents for blocks it refuses.
//   - files.getUploadURLExternal, the upload and files.completeUploadExternal (files.go): no recorded answer;
//     the upload URL is on the fake's host, and which error code each failure gets is a guess (files.go).
package slacktest
