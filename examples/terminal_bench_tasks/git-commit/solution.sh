git init -q -b main ~/repo
cd ~/repo
echo 'release 1.0' > notes.txt
git add notes.txt
git -c user.name=Agent -c user.email=agent@example.com commit -q -m 'Initial release'
git tag v1.0
git log --oneline --decorate
