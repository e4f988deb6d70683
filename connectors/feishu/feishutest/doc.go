// Package feishutest fakes the Feishu Open API and its long connection so that tests can drive the real Lark SDK against it.
//
// Its answers are held to the answers oapi-sdk-go's own tests record (testdata/platforms/feishu,
// TestShapesAsRecorded): every recorded field is in the fake's answer with the same JSON type; its
// long-connection frames to the frames those tests put on the wire (TestFramesAsRecorded): the same frame
// method, every recorded header, and the recorded pong payload's fields. Where the fake still has to
// guess, and why:
//
//   - callback/ws/endpoint: the fake answers data.URL and data.ClientConfig, the keys of the SDK's
//     larkws.Endpoint; the SDK's test records data.url. encoding/json matches keys case-insensitively, so the
//     SDK reads either; no recording of the real service's answer was at hand to settle it.
//   - im/v1/messages create, reply and patch: only create's success answer is recorded (code, msg,
//     data.message_id); the other fields of data (chat_id, root_id, thread_id, sender, body...) and the answers
//     of reply and patch follow the SDK's larkim models and Feishu's documentation, not a recording.
//   - Card JSON 2.0 limits (CheckCard, cardcheck.go): the documented size (30 KB), element count (200) and
//     element_id form; the set of config properties the fake knows is the documentation's, and a card
//     breaking a limit is answered 230001 (the code of invalid content), a guess.
//   - im/v1/files and file messages (files.go): no recorded answer; a file message naming a key the fake
//     never issued is answered 230001, a guess.
//   - Error answers: codes and HTTP statuses (99991400 with 429 and x-ogw-ratelimit-*, 230001, 230025,
//     99991661/99991663, 99992402, 10014) follow the documentation; the corpus records only code 999999 (no
//     public recording of the others was found: see the corpus README).
//   - Event frames: the headers beyond the recorded type, message_id and trace_id (sum, seq, timestamp) follow
//     the SDK's ws constants.
//   - Events (TestEventsAsRecorded): a MessageEvent has every field of the documentation's sample, but its
//     union_id and user_id are made from the open_id, its user_agent is "feishutest", and mentioned_type is
//     sent only when a test sets it (the event does not know which open_id is the bot); no p2p message was
//     found recorded. A CardAction has only fields of the SDK's card 2.0 payload, which is a link preview's:
//     the fake leaves out its url, preview_token, delivery_type, option and input_value.
//   - The answer to a card callback is the SDK's CardActionTriggerResponse model; no recording was found.
package feishutest
