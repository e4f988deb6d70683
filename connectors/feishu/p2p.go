package feishu

import "sync"

// maxP2PChats bounds the p2p chats a connector remembers (one per user
// it sent a direct message to or heard from in one): past it, the map
// starts again, and a user's next direct message learns the chat anew.
const maxP2PChats = 10000

// p2pChats remembers the p2p chat of each user, learned from the answer
// to a direct message (Direct) and from the user's messages in it, so
// that every send into one p2p chat is spaced under one key, the chat's:
// a direct message is addressed by open_id, a reply in its topic by the
// chat's ID, and Feishu's per-chat limit counts both. Until the chat is
// known (the first direct message to a user since the connector started)
// a send to the user is spaced under "user:<open_id>", and its answer
// makes the chat's ID share that key's spacing (Spacer.Share) unless the
// chat has had sends of its own already (then only that first message is
// spaced apart from them).
type p2pChats struct {
	mu   sync.Mutex
	chat map[string]string // open_id → chat ID
}

// key is the spacing key of a direct message to user.
func (p *p2pChats) key(user string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id := p.chat[user]; id != "" {
		return id
	}
	return "user:" + user
}

// learn notes that chatID is user's p2p chat.
func (p *p2pChats) learn(user, chatID string) {
	if user == "" || chatID == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.chat == nil || len(p.chat) >= maxP2PChats && p.chat[user] == "" {
		p.chat = map[string]string{}
	}
	p.chat[user] = chatID
}
