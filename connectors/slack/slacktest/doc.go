// Package slacktest is an in-process fake of Slack's Web API and Socket Mode that the real slack-go client talks to in tests.
//
// Its answers are held to the answers Slack gave as the SDKs record them (testdata/platforms/slack,
// TestShapesAsRecorded): every field of slack-go's recorded chat.postMessage answer is in the fake's with the
// same JSON type, and every field of the fake's auth.test and apps.connections.open answers is in
// java-slack-sdk's schema samples of them, with its type. Where the fake still has to guess, and why:
//
//   - chat.postMessage: the message object's app_id, bot_id, type and user are not in the recorded answer
//     (slack-go's fixture records text, ts and thread_ts); they follow Slack's documentation.
//   - chat.update, chat.postEphemeral, conversations.open, conversations.history and conversations.replies:
//     no recorded answer in the corpus (java-slack-sdk's samples of them are too large to copy by hand here);
//     their shapes follow slack-go's types and Slack's documentation.
//   - Error answers: the corpus records ratelimited (HTTP 429, Retry-After) and missing_scope; the other
//     error codes the fake answers follow the documentation.
//   - Block Kit limits (CheckBlocks, blocks.go): the documented ones; a message that breaks one is answered
//     invalid_blocks, the code Slack documents for blocks it refuses.
//   - files.getUploadURLExternal, the upload and files.completeUploadExternal (files.go): no recorded answer;
//     the upload URL is on the fake's host, and which error code each failure gets is a guess (files.go).
//   - Socket Mode: hello and disconnect frames and an events_api envelope are recorded; interactive envelopes
//     and acks follow slack-go's socketmode types.
package slacktest
