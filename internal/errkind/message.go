package errkind

import (
	"strconv"
	"strings"
)

// Message builds the message of a package's error type the way all of
// ckpt's read: the package's name and ": ", then the parts that are set,
// joined by ": ". Parts that are not set ("" or a nil error) are left out.
type Message struct {
	b    strings.Builder
	more bool // a part was written: the next one starts with ": "
}

// NewMessage starts the message of an error of package pkg.
func NewMessage(pkg string) *Message {
	m := &Message{}
	m.b.WriteString(pkg)
	m.b.WriteString(": ")
	return m
}

func (m *Message) sep() {
	if m.more {
		m.b.WriteString(": ")
	}
	m.more = true
}

// Add appends the part s, unless it is "".
func (m *Message) Add(s string) *Message {
	if s != "" {
		m.sep()
		m.b.WriteString(s)
	}
	return m
}

// Quote appends label, a space and s quoted as strconv.Quote does
// (`tensor "a.weight"`), or s quoted alone when label is "", unless s is
// "".
func (m *Message) Quote(label, s string) *Message {
	if s != "" {
		m.sep()
		if label != "" {
			m.b.WriteString(label)
			m.b.WriteByte(' ')
		}
		m.b.WriteString(strconv.Quote(s))
	}
	return m
}

// Err appends err's message, unless err is nil.
func (m *Message) Err(err error) *Message {
	if err != nil {
		m.sep()
		m.b.WriteString(err.Error())
	}
	return m
}

// String returns the message.
func (m *Message) String() string { return m.b.String() }
